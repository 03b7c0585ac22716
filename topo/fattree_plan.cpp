// SPDX-License-Identifier: BSD-2-Clause
// Aggregation trees per INC job (fattree_plan.h): root choice, breadth-first
// spanning tree over the switches, pruning, expected contribution counts.
#include "incxdp/fattree_plan.h"
#include "incxdp/fattree_routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <set>

namespace incxdp::topo {
namespace {

std::string job_ctx(const Topology &t, uint32_t fid) {
    return fmt::format("topology {}: plan fid {}", t.name, fid);
}

// Position of each node in the file (switches first, then hosts).
std::map<std::string, size_t> positions(const Topology &t) {
    std::map<std::string, size_t> pos;
    for (size_t i = 0; i < t.nodes.size(); ++i)
        pos.emplace(t.nodes[i].name, i);
    return pos;
}

// Distinct host names in file order, each checked to be a host of t.
std::vector<std::string> host_set(const Topology &t, const std::vector<std::string> &names,
                                  const char *what, uint32_t fid) {
    std::set<std::string> want;
    for (const std::string &n : names) {
        const Node *node = nullptr;
        for (const Node &x : t.nodes)
            if (x.name == n)
                node = &x;
        if (!node)
            throw TopologyError(
                fmt::format("{}: {} '{}' is not a node of the topology", job_ctx(t, fid), what, n));
        if (node->kind != NodeKind::Host)
            throw TopologyError(
                fmt::format("{}: {} '{}' is a switch, not a host", job_ctx(t, fid), what, n));
        want.insert(n);
    }
    std::vector<std::string> out;
    for (const Node &x : t.nodes)
        if (want.count(x.name))
            out.push_back(x.name);
    return out;
}

// Hop counts from `from` to every switch reachable through switch-switch links.
std::map<std::string, int> switch_distances(const Topology &t, const std::string &from) {
    return span_switches(t, from).level;
}

std::vector<std::string> members_of(const AggPlan &p) {
    std::set<std::string> all(p.contributors.begin(), p.contributors.end());
    all.insert(p.receivers.begin(), p.receivers.end());
    return {all.begin(), all.end()};
}

} // namespace

SwitchSpan span_switches(const Topology &t, const std::string &root) {
    SwitchSpan s;
    s.level[root] = 0;
    s.order.push_back(root);
    for (size_t i = 0; i < s.order.size(); ++i) {
        const Node &n = t.node(s.order[i]);
        for (const Iface &f : n.ifaces)
            if (t.node(f.peer_node).kind == NodeKind::Switch && !s.level.count(f.peer_node)) {
                s.level[f.peer_node] = s.level[n.name] + 1;
                s.parent[f.peer_node] = n.name;
                s.order.push_back(f.peer_node);
            }
    }
    return s;
}

const PlanSwitch &AggPlan::sw(const std::string &name) const {
    for (const PlanSwitch &s : switches)
        if (s.name == name)
            return s;
    throw TopologyError(fmt::format("plan of fid {}: switch '{}' is not in the tree", fid, name));
}

AggPlan build_agg_tree(const Topology &t, const std::string &root, const AggJob &job) {
    AggPlan p;
    p.fid = job.fid;
    p.root = root;
    p.contributors = host_set(t, job.contributors, "contributor", job.fid);
    p.receivers = host_set(t, job.receivers, "receiver", job.fid);
    if (p.contributors.empty())
        throw TopologyError(
            fmt::format("{}: no contributing host (no UP flow)", job_ctx(t, job.fid)));
    const Node *rn = nullptr;
    for (const Node &x : t.nodes)
        if (x.name == root)
            rn = &x;
    if (!rn || rn->kind != NodeKind::Switch)
        throw TopologyError(fmt::format("{}: root '{}' is not a switch of the topology",
                                        job_ctx(t, job.fid), root));
    const auto pos = positions(t);
    std::map<std::string, int> tiers;
    try {
        tiers = node_tiers(t);
    } catch (const TopologyError &) {
        // Tiers only annotate the plan; a switch without hosts has none.
    }

    // The spanning tree of the switches; cycles and parallel paths are cut
    // where breadth-first reaches a switch a second time.
    SwitchSpan span = span_switches(t, root);
    std::map<std::string, int> &level = span.level;
    const std::map<std::string, std::string> &parent = span.parent;
    const std::vector<std::string> &order = span.order;

    // Each member below the reachable switch it is linked to nearest the root.
    const std::set<std::string> contrib(p.contributors.begin(), p.contributors.end());
    std::map<std::string, uint32_t> contrib_below;
    std::map<std::string, size_t> first_host; // smallest file position at or below
    std::set<std::string> in_tree;
    for (const std::string &h : members_of(p)) {
        const Iface *best = nullptr;
        for (const Iface &f : t.node(h).ifaces)
            if (level.count(f.peer_node) && (!best || level[f.peer_node] < level[best->peer_node]))
                best = &f;
        if (!best)
            throw TopologyError(
                fmt::format("{}: host '{}' is linked to no switch reachable from root '{}'",
                            job_ctx(t, job.fid), h, root));
        p.leaf[h] = best->peer_node;
        first_host[h] = pos.at(h);
        contrib_below[h] = contrib.count(h) ? 1 : 0;
        // Mark the path to the root.
        for (std::string s = best->peer_node;; s = parent.at(s)) {
            in_tree.insert(s);
            contrib_below[s] += contrib_below[h];
            auto [it, fresh] = first_host.emplace(s, pos.at(h));
            if (!fresh)
                it->second = std::min(it->second, pos.at(h));
            if (s == root)
                break;
        }
    }

    std::map<std::string, std::vector<std::string>> children;
    for (const auto &[h, s] : p.leaf)
        children[s].push_back(h);
    for (const std::string &s : order)
        if (in_tree.count(s) && s != root)
            children[parent.at(s)].push_back(s);
    for (const std::string &s : order) {
        if (!in_tree.count(s))
            continue;
        PlanSwitch ps;
        ps.name = s;
        ps.level = level.at(s);
        ps.tier = tiers.count(s) ? tiers.at(s) : 0;
        if (s != root)
            ps.parent = parent.at(s);
        ps.children = children[s];
        std::sort(ps.children.begin(), ps.children.end(),
                  [&](const std::string &a, const std::string &b) {
                      return first_host.at(a) < first_host.at(b);
                  });
        for (const std::string &c : ps.children)
            if (contrib_below.at(c) > 0)
                ++ps.expected;
        ps.contributors_below = contrib_below.at(s);
        p.switches.push_back(std::move(ps));
    }
    return p;
}

std::vector<AggPlan> plan_agg_jobs(const Topology &t, const std::vector<AggJob> &jobs) {
    std::map<std::string, std::set<std::string>> below;
    std::map<std::string, int> tiers;
    try {
        tiers = node_tiers(t);
        below = hosts_below(t, tiers);
    } catch (const TopologyError &) {
        // No tiers: every root is chosen by distance below.
    }
    const auto pos = positions(t);
    std::map<std::string, size_t> load; // jobs rooted at each switch so far
    std::vector<AggPlan> out;
    for (const AggJob &job : jobs) {
        if (host_set(t, job.contributors, "contributor", job.fid).empty())
            throw TopologyError(
                fmt::format("{}: no contributing host (no UP flow)", job_ctx(t, job.fid)));
        const auto rec = host_set(t, job.receivers, "receiver", job.fid);
        std::set<std::string> members(rec.begin(), rec.end());
        members.insert(job.contributors.begin(), job.contributors.end());
        // Candidates: the lowest tier with every member below.
        std::vector<std::string> cands;
        int best_tier = std::numeric_limits<int>::max();
        for (const Node &s : t.nodes) {
            if (s.kind != NodeKind::Switch || !below.count(s.name) || members.empty())
                continue;
            const auto &b = below.at(s.name);
            if (!std::includes(b.begin(), b.end(), members.begin(), members.end()))
                continue;
            const int tr = tiers.at(s.name);
            if (tr < best_tier) {
                best_tier = tr;
                cands.clear();
            }
            if (tr == best_tier)
                cands.push_back(s.name);
        }
        // Otherwise: the switches nearest all members' switches.
        if (cands.empty()) {
            int best = std::numeric_limits<int>::max();
            for (const Node &s : t.nodes) {
                if (s.kind != NodeKind::Switch)
                    continue;
                const auto d = switch_distances(t, s.name);
                int ecc = 0;
                for (const std::string &h : members) {
                    int near = std::numeric_limits<int>::max();
                    for (const Node &x : t.nodes)
                        if (x.name == h)
                            for (const Iface &f : x.ifaces)
                                if (d.count(f.peer_node))
                                    near = std::min(near, d.at(f.peer_node));
                    ecc = std::max(ecc, near);
                }
                if (ecc < best) {
                    best = ecc;
                    cands.clear();
                }
                if (ecc == best && ecc != std::numeric_limits<int>::max())
                    cands.push_back(s.name);
            }
        }
        if (cands.empty())
            throw TopologyError(
                fmt::format("{}: no switch reaches every host of the job", job_ctx(t, job.fid)));
        // Fewest jobs rooted so far, then file order: jobs spread over cores.
        const std::string root = *std::min_element(
            cands.begin(), cands.end(), [&](const std::string &a, const std::string &b) {
                return std::pair(load[a], pos.at(a)) < std::pair(load[b], pos.at(b));
            });
        out.push_back(build_agg_tree(t, root, job));
        ++load[root];
    }
    return out;
}

} // namespace incxdp::topo
