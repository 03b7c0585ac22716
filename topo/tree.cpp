// SPDX-License-Identifier: BSD-2-Clause
// plan_tree(): a roce-tree job's connections and per-switch rules, derived
// from the topology file alone (tree.h, docs/ROCE.md, docs/TOPOLOGY.md).
//
// Derivations, for job j and connection index c (TreePlan::conns order:
// switches root first then breadth-first, each switch's children in rank
// order):
//   child QPN   = j << 16 | c << 4 | 1      parent QPN = j << 16 | c << 4 | 2
//   up_base     = start + 16 c              down_base  = start + 16 c + 8   (mod 2^24)
//   start       = the job's start_psn, else 0x10000 (j + 1) mod 2^24
//   UDP sport   = 0xC000 | (sender's QPN mod 2^14)
// QPNs are unique across the whole file (the job id is in them), never 0
// (the low nibble is 1 or 2) and below 2^24 (j < 256, c < 4096). The PSN
// bases all lie within 16 x (connections) of start, so a start_psn just
// below 2^24 makes every stream of the job wrap early in a run.
#include "incxdp/tree.h"
#include "incxdp/fattree_plan.h"
#include "incxdp/tree_json.h"
#include "tree_detail.h"

#include <incxdp/maps.h>
#include <incxdp/proto.h>

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <deque>
#include <map>
#include <set>

namespace incxdp::topo {
namespace detail {
namespace {

constexpr uint32_t kPsnMask = 0xFFFFFF;
constexpr uint32_t kPsnStride = 16;      // per connection: up at +0, down at +8
constexpr uint32_t kMaxConns = 1u << 12; // c's field in the QPN

const Iface &iface_to(const Node &n, const std::string &peer) {
    for (const Iface &i : n.ifaces)
        if (i.peer_node == peer)
            return i;
    throw TreeProblem(fmt::format("no link between '{}' and '{}'", n.name, peer));
}

bool is_switch(const Topology &t, const std::string &name) {
    return t.node(name).kind == NodeKind::Switch;
}

// The tree without addresses: which switches, who is whose parent, the
// children of each switch in rank order. The tree itself is
// build_agg_tree()'s, the planner of every job kind; only the order of
// children (rank order, which fixes the connection indices and so the QPNs
// and PSNs) is the RoCE plan's own.
struct Shape {
    struct Child {
        std::string node;
        bool is_switch = false;
        uint32_t min_rank = 0;
    };
    std::vector<std::string> switches;         // root first, then breadth-first
    std::map<std::string, std::string> parent; // switch -> its parent, "" at the root
    std::map<std::string, std::vector<Child>> children;
    std::vector<std::string> leaf; // rank -> switch the worker hangs below
};

Shape shape_of(const Topology &t, const Job &job) {
    const std::string &root = job.switch_name;
    if (!is_switch(t, root))
        throw TreeProblem(fmt::format("root '{}' is a host, not a switch", root));

    // A worker no switch of the spanning tree reaches, named with its rank.
    const SwitchSpan span = span_switches(t, root);
    for (uint32_t r = 0; r < job.workers.size(); ++r) {
        const Node &h = t.node(job.workers[r]);
        std::vector<std::string> outside;
        bool reached = false;
        for (const Iface &ifc : h.ifaces)
            if (span.level.count(ifc.peer_node))
                reached = true;
            else
                outside.push_back(ifc.peer_node);
        if (!reached) {
            std::string why = outside.empty() ? "it has no links"
                                              : fmt::format("it is linked only to '{}'",
                                                            fmt::join(outside, "', '"));
            throw TreeProblem(fmt::format("worker '{}' (rank {}) is not reachable from root '{}' "
                                          "through switch-switch links ({})",
                                          h.name, r, root, why));
        }
    }
    AggPlan plan;
    try {
        plan = build_agg_tree(t, root, {job.id, job.workers, job.workers});
    } catch (const TopologyError &e) {
        throw TreeProblem(e.what());
    }

    Shape s;
    std::map<std::string, uint32_t> min_rank; // switches with workers at or below
    for (uint32_t r = 0; r < job.workers.size(); ++r) {
        s.leaf.push_back(plan.leaf.at(job.workers[r]));
        for (std::optional<std::string> sw = s.leaf.back(); sw; sw = plan.sw(*sw).parent)
            if (!min_rank.count(*sw))
                min_rank[*sw] = r; // ranks are visited in order: the first is the least
    }

    for (const PlanSwitch &ps : plan.switches)
        if (ps.parent)
            s.children[*ps.parent].push_back({ps.name, true, min_rank.at(ps.name)});
    for (uint32_t r = 0; r < job.workers.size(); ++r)
        s.children[s.leaf[r]].push_back({job.workers[r], false, r});
    for (auto &[sw, ch] : s.children) {
        std::sort(ch.begin(), ch.end(), [](const Shape::Child &a, const Shape::Child &b) {
            return a.min_rank < b.min_rank;
        });
        // The slot bitmap has one bit per child.
        if (ch.size() > INCXDP_MAX_WORKERS)
            throw TreeProblem(fmt::format("switch '{}' has {} children in the tree; a switch "
                                          "aggregates at most {}",
                                          sw, ch.size(), INCXDP_MAX_WORKERS));
    }

    for (std::deque<std::string> q{root}; !q.empty(); q.pop_front()) {
        const std::string sw = q.front();
        s.switches.push_back(sw);
        s.parent[sw] = plan.sw(sw).parent.value_or("");
        for (const auto &c : s.children[sw])
            if (c.is_switch)
                q.push_back(c.node);
    }
    return s;
}

// Slots of the jobs before `job` in the file on switch `sw`: the pool of
// `job` starts there, as job_add's first fit places pools added in file order.
uint32_t pool_base(const Topology &t, const Job &job, const std::string &sw) {
    uint32_t base = 0;
    for (const Job &other : t.jobs) {
        if (other.id == job.id)
            break;
        bool uses = other.switch_name == sw;
        if (!uses && other.kind != JobKind::Star) {
            Shape s;
            try {
                s = shape_of(t, other);
            } catch (const TreeProblem &e) {
                throw TreeProblem(fmt::format("earlier job {} (which shares the slot array): {}",
                                              other.id, e.what()));
            }
            uses = std::find(s.switches.begin(), s.switches.end(), sw) != s.switches.end();
        }
        if (uses)
            base += other.slots;
    }
    return base;
}

} // namespace

TreePlan build_tree(const Topology &t, uint32_t job_id) {
    const Job &job = t.job(job_id);
    if (job.slots == 0 || (job.slots & (job.slots - 1)) != 0)
        throw TreeProblem(fmt::format("slots {} is not a power of two", job.slots));
    if (job.workers.empty() || job.workers.size() > kMaxTreeRanks)
        throw TreeProblem(fmt::format("{} workers; a roce-tree job has 1..{}", job.workers.size(),
                                      kMaxTreeRanks));
    const Shape s = shape_of(t, job);

    TreePlan plan;
    plan.job = job.id;
    plan.host_order = job.host_order;
    plan.root = job.switch_name;
    plan.ranks = job.workers;
    plan.host_conn.resize(job.workers.size());
    const uint32_t start =
        job.start_psn ? *job.start_psn & kPsnMask : (0x10000u * (job.id + 1)) & kPsnMask;

    std::map<std::string, size_t> sw_index;
    for (const std::string &name : s.switches) {
        sw_index[name] = plan.switches.size();
        TreeSwitch ts;
        ts.name = name;
        ts.root = name == plan.root;
        ts.pool_base = pool_base(t, job, name);
        ts.pool_size = job.slots;
        plan.switches.push_back(std::move(ts));
    }
    // Ranks at or below each node, for subtree_ranks.
    std::map<std::string, uint64_t> below;
    for (uint32_t r = 0; r < job.workers.size(); ++r) {
        below[job.workers[r]] |= uint64_t{1} << r;
        for (std::string sw = s.leaf[r]; !sw.empty(); sw = s.parent.at(sw))
            below[sw] |= uint64_t{1} << r;
    }

    for (const std::string &pname : s.switches) {
        const Node &p = t.node(pname);
        for (const auto &ch : s.children.at(pname)) {
            const size_t c = plan.conns.size();
            if (c >= kMaxConns)
                throw TreeProblem(fmt::format("more than {} connections", kMaxConns));
            const Node &cn = t.node(ch.node);
            const Iface &ci = iface_to(cn, pname);
            const Iface &pi = iface_to(p, cn.name);
            RoceConn rc;
            rc.child = cn.name;
            rc.parent = pname;
            rc.child_iface = ci.name;
            rc.parent_iface = pi.name;
            rc.child_mac = ci.mac;
            rc.parent_mac = pi.mac;
            rc.child_ip = cn.ip;
            rc.parent_ip = p.ip;
            const uint32_t qbase = job.id << 16 | static_cast<uint32_t>(c) << 4;
            rc.child_qpn = qbase | 1;
            rc.parent_qpn = qbase | 2;
            rc.up_base = (start + kPsnStride * static_cast<uint32_t>(c)) & kPsnMask;
            rc.down_base = (start + kPsnStride * static_cast<uint32_t>(c) + 8) & kPsnMask;
            rc.child_sport = static_cast<uint16_t>(0xC000 | (rc.child_qpn & 0x3FFF));
            rc.parent_sport = static_cast<uint16_t>(0xC000 | (rc.parent_qpn & 0x3FFF));
            rc.child_is_switch = ch.is_switch;
            rc.subtree_ranks = below[cn.name];
            plan.conns.push_back(std::move(rc));
            plan.switches[sw_index[pname]].child_conns.push_back(c);
            if (ch.is_switch)
                plan.switches[sw_index[cn.name]].parent_conn = c;
            else
                plan.host_conn[ch.min_rank] = c;
        }
    }
    return plan;
}

} // namespace detail

TreePlan plan_tree(const Topology &t, uint32_t job_id) {
    const Job &job = t.job(job_id); // throws "topology T has no job N"
    if (job.kind != JobKind::RoceTree)
        throw TopologyError(fmt::format("topology {}: job {} is a {} job, not a roce-tree job",
                                        t.name, job_id, job_kind_name(job.kind)));
    try {
        return detail::build_tree(t, job_id);
    } catch (const detail::TreeProblem &e) {
        throw TopologyError(fmt::format("topology {}: job {} (roce-tree, root {}): {}", t.name,
                                        job_id, job.switch_name, e.what()));
    }
}

const TreeSwitch &TreePlan::sw(const std::string &name) const {
    for (const TreeSwitch &s : switches)
        if (s.name == name)
            return s;
    throw TopologyError(fmt::format("job {}: switch '{}' is not in the job's tree", job, name));
}

const RoceConn &TreePlan::conn_of_rank(uint32_t rank) const {
    if (rank >= host_conn.size())
        throw TopologyError(
            fmt::format("job {}: no rank {} (the job has {} ranks)", job, rank, host_conn.size()));
    return conns[host_conn[rank]];
}

std::string switch_pin_dir(const std::string &pin_root, const std::string &prefix,
                           const std::string &sw) {
    std::string root = pin_root;
    if (root.empty()) {
        const char *env = std::getenv("INCXDP_PIN_DIR");
        root = env && *env ? env : INCXDP_PIN_DIR;
    }
    while (root.size() > 1 && root.back() == '/')
        root.pop_back();
    return root + "/" + netns_name(prefix, sw);
}

void to_json(nlohmann::json &j, const RoceConn &c) {
    j = {{"child", c.child},
         {"parent", c.parent},
         {"child_iface", c.child_iface},
         {"parent_iface", c.parent_iface},
         {"child_mac", mac_to_string(c.child_mac)},
         {"parent_mac", mac_to_string(c.parent_mac)},
         {"child_ip", c.child_ip},
         {"parent_ip", c.parent_ip},
         {"child_qpn", c.child_qpn},
         {"parent_qpn", c.parent_qpn},
         {"up_base", c.up_base},
         {"down_base", c.down_base},
         {"child_sport", c.child_sport},
         {"parent_sport", c.parent_sport},
         {"child_is_switch", c.child_is_switch},
         {"subtree_ranks", c.subtree_ranks}};
}

} // namespace incxdp::topo
