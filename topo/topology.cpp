// SPDX-License-Identifier: BSD-2-Clause
// Parsing, validation and the deterministic derivations of topology.h.
// docs/TOPOLOGY.md is the user-facing description of the same rules.
#include "incxdp/topology.h"
#include "incxdp/fattree_plan.h"
#include "incxdp/fattree_routes.h"
#include "incxdp/smi_topology.h"
#include "addr_detail.h"
#include "mesh_detail.h"
#include "tree_detail.h"
#include "yaml_reader.h"

#include <incxdp/maps.h>
#include <incxdp/proto.h>

#include <arpa/inet.h>
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace incxdp::topo {
namespace {

using detail::Cidr;
using detail::format_ipv4;
using detail::kMaxIfName;
using detail::kMaxIndex;
using detail::kMaxMtu;
using detail::kMaxNetnsName;
using detail::kMaxNodeName;
using detail::kMinMtu;
using detail::parse_ipv4;
using detail::valid_name;
using detail::YamlReader;

constexpr int64_t kRocePsnMask = 0xFFFFFF;

using Subnet = Cidr;

Subnet parse_subnet(const YamlReader &r, const YAML::Node &root) {
    const std::string s = r.str(root, "subnet", "");
    std::string err;
    // /31 and /32 leave no room for hosts next to the switch address.
    const auto sn = detail::parse_cidr(s, 30, &err);
    if (!sn)
        r.fail(root["subnet"], "subnet", err);
    return *sn;
}

} // namespace

namespace detail {

int parse_mtu(const YamlReader &r, const YAML::Node &root) {
    const auto mtu = r.integer(root, "mtu", "", INCXDP_LINK_MTU, kMinMtu, INT32_MAX);
    if (mtu > kMaxMtu)
        r.fail(
            root["mtu"], "mtu",
            fmt::format("{} is above {}, the largest (jumbo) MTU incxdp supports", mtu, kMaxMtu));
    return static_cast<int>(mtu);
}

} // namespace detail

namespace {

// State shared by the parse steps below.
struct Builder {
    const YamlReader &r;
    Subnet subnet;
    Topology t;
    std::map<std::string, size_t> index;      // node name -> position in t.nodes
    std::map<uint32_t, std::string> ip_owner; // address -> node name

    void add_nodes(const YAML::Node &root, const char *key, NodeKind kind) {
        const YAML::Node list = root[key];
        if (!list.IsDefined() || list.IsNull())
            r.fail(root, "", fmt::format("missing required key '{}'", key));
        r.expect_seq(list, key);
        if (list.size() == 0)
            r.fail(list, key, "at least one entry is required");
        for (size_t i = 0; i < list.size(); ++i) {
            const YAML::Node n = list[i];
            std::string where = fmt::format("{}[{}]", key, i);
            if (kind == NodeKind::Host)
                r.expect_map(n, where, {"name", "ip", "iface", "mac"});
            else
                r.expect_map(n, where, {"name", "ip"});
            Node node;
            node.kind = kind;
            node.name = r.str(n, "name", where);
            if (!valid_name(node.name, kMaxNodeName))
                r.fail(n["name"], where,
                       fmt::format("bad node name '{}': use 1-{} characters from [a-z0-9_-]",
                                   node.name, kMaxNodeName));
            where += " (" + node.name + ")";
            if (index.count(node.name))
                r.fail(n["name"], where, fmt::format("duplicate node name '{}'", node.name));
            const std::string ip_s = r.str(n, "ip", where);
            const auto ip = parse_ipv4(ip_s);
            if (!ip)
                r.fail(n["ip"], where, fmt::format("bad IPv4 address '{}'", ip_s));
            if (!subnet.usable(*ip))
                r.fail(
                    n["ip"], where,
                    fmt::format("address {} is not a usable address of subnet {}", ip_s, t.subnet));
            if (auto it = ip_owner.find(*ip); it != ip_owner.end())
                r.fail(n["ip"], where,
                       fmt::format("duplicate address {} (also used by '{}')", ip_s, it->second));
            ip_owner[*ip] = node.name;
            node.ip = format_ipv4(*ip);
            if (t.nodes.size() >= kMaxIndex)
                r.fail(n, where, fmt::format("more than {} nodes", kMaxIndex));
            index[node.name] = t.nodes.size();
            t.nodes.push_back(std::move(node));
        }
    }

    // Appends the interface of node `self` towards `peer` and returns its position.
    size_t add_iface(size_t self, const std::string &peer, const YAML::Node &at,
                     const std::string &where) {
        Node &n = t.nodes[self];
        const size_t k = n.ifaces.size();
        if (k >= kMaxIndex)
            r.fail(at, where, fmt::format("node '{}' has more than {} links", n.name, kMaxIndex));
        Iface ifc;
        ifc.name = n.kind == NodeKind::Host ? fmt::format("eth{}", k)
                                            : ("p-" + peer).substr(0, kMaxIfName);
        for (const Iface &other : n.ifaces)
            if (other.name == ifc.name)
                r.fail(at, where,
                       fmt::format("interface name '{}' on node '{}' is used twice (towards '{}' "
                                   "and '{}')",
                                   ifc.name, n.name, other.peer_node, peer));
        ifc.mac = {0x02, 0x49, 0x58, static_cast<uint8_t>(self), static_cast<uint8_t>(k), 0x00};
        ifc.peer_node = peer;
        n.ifaces.push_back(std::move(ifc));
        return k;
    }

    void add_links(const YAML::Node &list) {
        r.expect_seq(list, "links");
        std::set<std::pair<std::string, std::string>> seen;
        for (size_t i = 0; list.IsDefined() && i < list.size(); ++i) {
            const YAML::Node l = list[i];
            const std::string where = fmt::format("links[{}]", i);
            const bool mapping = l.IsMap();
            if (mapping)
                r.expect_map(l, where, {"a", "b", "a_iface", "b_iface", "a_mac", "b_mac"});
            else if (!l.IsSequence() || l.size() != 2)
                r.fail(l, where,
                       "expected a pair of node names, e.g. [w0, sw], or a mapping {a: w0, b: "
                       "sw, a_iface: ..., a_mac: ...}");
            const YAML::Node na = mapping ? l["a"] : l[0], nb = mapping ? l["b"] : l[1];
            Link link{mapping ? r.str(l, "a", where) : r.scalar(na, where),
                      mapping ? r.str(l, "b", where) : r.scalar(nb, where)};
            for (const auto &[name, at] : {std::pair{link.a, na}, std::pair{link.b, nb}})
                if (!index.count(name))
                    r.fail(at, where, fmt::format("unknown node '{}'", name));
            const size_t ia = index[link.a], ib = index[link.b];
            if (ia == ib)
                r.fail(l, where, fmt::format("node '{}' is linked to itself", link.a));
            // Hosts only talk to switches; a host-host veth has no role here.
            if (t.nodes[ia].kind == NodeKind::Host && t.nodes[ib].kind == NodeKind::Host)
                r.fail(l, where,
                       fmt::format("hosts '{}' and '{}' cannot be linked directly; one end must "
                                   "be a switch",
                                   link.a, link.b));
            if (!seen.insert(std::minmax(link.a, link.b)).second)
                r.fail(l, where,
                       fmt::format("duplicate link between '{}' and '{}'", link.a, link.b));
            const size_t ka = add_iface(ia, link.b, l, where);
            const size_t kb = add_iface(ib, link.a, l, where);
            if (mapping) {
                link_end_overrides(l, "a", ia, ka, where);
                link_end_overrides(l, "b", ib, kb, where);
            }
            t.nodes[ia].ifaces[ka].peer_iface = t.nodes[ib].ifaces[kb].name;
            t.nodes[ib].ifaces[kb].peer_iface = t.nodes[ia].ifaces[ka].name;
            link.a_iface = t.nodes[ia].ifaces[ka].name;
            link.b_iface = t.nodes[ib].ifaces[kb].name;
            t.links.push_back(std::move(link));
        }
    }

    // `a_iface`/`a_mac` (end "a", likewise "b") of a link given as a
    // mapping: the real interface name and MAC of that end.
    void link_end_overrides(const YAML::Node &l, const std::string &end, size_t self, size_t k,
                            const std::string &where) {
        Node &n = t.nodes[self];
        Iface &own = n.ifaces[k];
        if (const YAML::Node v = l[end + "_iface"]; v.IsDefined() && !v.IsNull()) {
            const std::string name = r.scalar(v, where + "." + end + "_iface");
            if (!detail::valid_ifname(name))
                r.fail(v, where,
                       fmt::format("bad interface name '{}': use 1-{} characters from "
                                   "[A-Za-z0-9_.-]",
                                   name, kMaxIfName));
            for (const Iface &other : n.ifaces)
                if (&other != &own && other.name == name)
                    r.fail(v, where,
                           fmt::format("interface name '{}' on node '{}' is used twice (towards "
                                       "'{}' and '{}')",
                                       name, n.name, other.peer_node, own.peer_node));
            own.name = name;
        }
        if (const YAML::Node v = l[end + "_mac"]; v.IsDefined() && !v.IsNull()) {
            Mac m{};
            try {
                m = mac_from_string(r.scalar(v, where + "." + end + "_mac"));
            } catch (const TopologyError &e) {
                r.fail(v, where, e.what());
            }
            if (const std::string why = detail::mac_problem(m); !why.empty())
                r.fail(v, where, why);
            for (const Node &o : t.nodes)
                for (const Iface &x : o.ifaces)
                    if (&x != &own && x.mac == m)
                        r.fail(v, where,
                               fmt::format("duplicate MAC {} (also on {}:{})", mac_to_string(m),
                                           o.name, x.name));
            own.mac = m;
        }
    }

    // A host's address goes on its first interface.
    void address_hosts() {
        for (Node &n : t.nodes)
            if (n.kind == NodeKind::Host && !n.ifaces.empty()) {
                n.ifaces[0].ip = n.ip;
                n.ifaces[0].prefix_len = t.prefix_len;
            }
    }

    // `iface:` and `mac:` on a host name the interface of its one link, for
    // hosts that stand for real machines. A multi-homed host has no single
    // link to apply them to.
    void apply_host_overrides(const YAML::Node &hosts) {
        for (size_t i = 0; i < hosts.size(); ++i) {
            const YAML::Node h = hosts[i];
            const YAML::Node ifn = h["iface"], macn = h["mac"];
            if (!ifn.IsDefined() && !macn.IsDefined())
                continue;
            Node &n = t.nodes[index.at(r.scalar(h["name"], "name"))];
            const std::string where = fmt::format("hosts[{}] ({})", i, n.name);
            if (n.ifaces.size() != 1)
                r.fail(ifn.IsDefined() ? ifn : macn, where,
                       fmt::format("iface/mac on a host need exactly one link; '{}' has {}", n.name,
                                   n.ifaces.size()));
            Iface &own = n.ifaces[0];
            if (ifn.IsDefined()) {
                const std::string name = r.scalar(ifn, where + ".iface");
                if (!detail::valid_ifname(name))
                    r.fail(ifn, where,
                           fmt::format("bad interface name '{}': use 1-{} characters from "
                                       "[A-Za-z0-9_.-]",
                                       name, kMaxIfName));
                rename(n, own, name);
            }
            if (macn.IsDefined()) {
                const std::string s = r.scalar(macn, where + ".mac");
                Mac m{};
                try {
                    m = mac_from_string(s);
                } catch (const TopologyError &e) {
                    r.fail(macn, where, e.what());
                }
                if (const std::string why = detail::mac_problem(m); !why.empty())
                    r.fail(macn, where, why);
                for (const Node &o : t.nodes)
                    for (const Iface &x : o.ifaces)
                        if (&x != &own && x.mac == m)
                            r.fail(macn, where,
                                   fmt::format("duplicate MAC {} (also on {}:{})", mac_to_string(m),
                                               o.name, x.name));
                own.mac = m;
            }
        }
    }

    void rename(const Node &n, Iface &own, const std::string &name) {
        Node &peer = t.nodes[index.at(own.peer_node)];
        for (Iface &x : peer.ifaces)
            if (x.peer_node == n.name)
                x.peer_iface = name;
        for (Link &l : t.links) {
            if (l.a == n.name)
                l.a_iface = name;
            if (l.b == n.name)
                l.b_iface = name;
        }
        own.name = name;
    }

    bool linked(const Node &a, const std::string &b) const {
        for (const Iface &i : a.ifaces)
            if (i.peer_node == b)
                return true;
        return false;
    }

    void add_jobs(const YAML::Node &list) {
        r.expect_seq(list, "jobs");
        for (size_t i = 0; list.IsDefined() && i < list.size(); ++i) {
            const YAML::Node j = list[i];
            std::string where = fmt::format("jobs[{}]", i);
            r.expect_map(j, where,
                         {"id", "kind", "switch", "workers", "worker_port", "slots", "start_psn",
                          "host_order"});
            Job job;
            job.id = static_cast<uint32_t>(r.integer(j, "id", where, 0, INCXDP_MAX_JOBS - 1));
            where += fmt::format(" (id {})", job.id);
            for (const Job &other : t.jobs)
                if (other.id == job.id)
                    r.fail(j["id"], where, fmt::format("duplicate job id {}", job.id));
            job.kind = parse_kind(j, where);
            const bool tree = job.kind == JobKind::RoceTree;
            job.switch_name = r.str(j, "switch", where);
            const auto sw = index.find(job.switch_name);
            if (sw == index.end())
                r.fail(j["switch"], where, fmt::format("unknown node '{}'", job.switch_name));
            const Node &swn = t.nodes[sw->second];
            if (swn.kind != NodeKind::Switch)
                r.fail(j["switch"], where, fmt::format("'{}' is a host, not a switch", swn.name));
            // RoCEv2 has its own UDP port (4791) and a source port per
            // connection; PSNs exist only there.
            if (tree && j["worker_port"].IsDefined())
                r.fail(j["worker_port"], where,
                       "worker_port does not apply to a roce-tree job (RoCEv2 uses UDP 4791 "
                       "and a source port per connection)");
            for (const char *key : {"start_psn", "host_order"})
                if (!tree && j[key].IsDefined())
                    r.fail(
                        j[key], where,
                        fmt::format("{} applies only to a roce-tree job (kind: roce-tree)", key));
            job.worker_port = static_cast<uint16_t>(
                r.integer(j, "worker_port", where, job.worker_port, 1, 65535));
            // The window slot travels in 14 bits of the native header; a
            // tree keeps the same bound.
            job.slots = static_cast<uint32_t>(
                r.integer(j, "slots", where, job.slots, 1, INCXDP_SLOT_INDEX_MASK + 1));
            // A PSN picks slot idx % slots and set (idx / slots) & 1; only a
            // power of two keeps that consistent across the 24-bit wrap.
            if (tree && (job.slots & (job.slots - 1)) != 0)
                r.fail(j["slots"], where,
                       fmt::format("slots {} is not a power of two, which a roce-tree job needs "
                                   "(its PSNs wrap at 2^24)",
                                   job.slots));
            if (tree && j["start_psn"].IsDefined())
                job.start_psn =
                    static_cast<uint32_t>(r.integer(j, "start_psn", where, 0, kRocePsnMask));
            if (tree && j["host_order"].IsDefined())
                job.host_order = parse_host_order(j["host_order"], where);
            add_workers(j, where, swn, job);
            t.jobs.push_back(std::move(job));
        }
        // Tree shape (cycles, unreachable workers, fan-in) once every job is
        // known: pool bases depend on the earlier jobs.
        for (size_t i = 0; list.IsDefined() && i < list.size(); ++i) {
            const Job &job = t.jobs[i];
            if (job.kind == JobKind::Tree) {
                // Every worker below a switch reachable from the root.
                try {
                    build_agg_tree(t, job.switch_name, {job.id, job.workers, job.workers});
                } catch (const TopologyError &e) {
                    r.fail(list[i], fmt::format("jobs[{}] (id {})", i, job.id), e.what());
                }
            }
            if (job.kind != JobKind::RoceTree)
                continue;
            try {
                detail::build_tree(t, job.id);
            } catch (const detail::TreeProblem &e) {
                r.fail(list[i], fmt::format("jobs[{}] (id {})", i, job.id), e.what());
            }
        }
    }

    JobKind parse_kind(const YAML::Node &j, const std::string &where) {
        const YAML::Node k = j["kind"];
        if (!k.IsDefined() || k.IsNull())
            return JobKind::Star;
        const std::string s = r.scalar(k, where + ".kind");
        if (s == "star")
            return JobKind::Star;
        if (s == "roce-tree")
            return JobKind::RoceTree;
        if (s == "tree")
            return JobKind::Tree;
        r.fail(k, where,
               fmt::format("unknown job kind '{}' (expected star, roce-tree or tree)", s));
    }

    HostOrder parse_host_order(const YAML::Node &k, const std::string &where) {
        const std::string s = r.scalar(k, where + ".host_order");
        if (s == "strict")
            return HostOrder::Strict;
        if (s == "any")
            return HostOrder::Any;
        r.fail(k, where,
               fmt::format("unknown host_order '{}' (expected strict: RC go-back-N, or any: "
                           "hostlib hosts, selective resend)",
                           s));
    }

    void add_workers(const YAML::Node &j, const std::string &where, const Node &sw, Job &job) {
        const YAML::Node w = j["workers"];
        if (!w.IsDefined() || w.IsNull())
            r.fail(j, where, "missing required key 'workers'");
        if (!w.IsSequence() || w.size() == 0)
            r.fail(w, where + ".workers", "expected a non-empty list of host names");
        // Star: one bit per rank in the switch's slot bitmap. Tree: one bit
        // per rank in a connection's subtree_ranks (the fan-in of each
        // switch is checked with the tree).
        const size_t max_workers =
            job.kind == JobKind::RoceTree ? detail::kMaxTreeRanks : INCXDP_MAX_WORKERS;
        if (w.size() > max_workers)
            r.fail(w, where + ".workers",
                   fmt::format("{} workers; at most {} are supported", w.size(), max_workers));
        for (size_t k = 0; k < w.size(); ++k) {
            const std::string name = r.scalar(w[k], where + ".workers");
            const auto it = index.find(name);
            if (it == index.end())
                r.fail(w[k], where, fmt::format("unknown node '{}'", name));
            const Node &h = t.nodes[it->second];
            if (h.kind != NodeKind::Host)
                r.fail(w[k], where, fmt::format("worker '{}' is a switch, not a host", name));
            for (const auto &prev : job.workers)
                if (prev == name)
                    r.fail(w[k], where, fmt::format("worker '{}' is listed twice", name));
            // A tree's workers hang below any switch of the tree (checked
            // with the tree's shape).
            if (job.kind == JobKind::Star && !linked(h, sw.name))
                r.fail(w[k], where,
                       fmt::format("worker '{}' is not directly linked to switch '{}'", name,
                                   sw.name));
            job.workers.push_back(name);
        }
    }
};

// `routing: updown` (fattree_routes.h): checked here so a topology whose
// switches cannot route every host fails at parse time, with a position.
void parse_routing(const YamlReader &r, const YAML::Node &root, Topology &t) {
    const YAML::Node n = root["routing"];
    if (!n.IsDefined() || n.IsNull())
        return;
    const std::string v = r.scalar(n, "routing");
    if (v != "updown")
        r.fail(n, "routing", fmt::format("unknown routing '{}' (expected updown)", v));
    t.routing = Routing::UpDown;
    try {
        updown_routes(t);
    } catch (const TopologyError &e) {
        r.fail(n, "routing", e.what());
    }
}

Topology parse_text(const std::string &text, const std::string &source) {
    const YamlReader r(source);
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception &e) {
        throw TopologyError(fmt::format("{}:{}:{}: YAML syntax error: {}", source, e.mark.line + 1,
                                        e.mark.column + 1, e.msg));
    }
    if (!root.IsDefined() || root.IsNull())
        throw TopologyError(source + ": empty topology file");
    if (detail::is_mesh(r, root))
        return detail::parse_mesh(r, root);
    r.expect_map(
        root, "",
        {"name", "kind", "subnet", "mtu", "switches", "hosts", "links", "jobs", "routing"});

    Builder b{r, {}, {}, {}, {}};
    b.t.name = r.str(root, "name", "");
    if (!valid_name(b.t.name, kMaxNetnsName))
        r.fail(root["name"], "name",
               fmt::format("bad topology name '{}': use 1-{} characters from [a-z0-9_-]", b.t.name,
                           kMaxNetnsName));
    b.subnet = parse_subnet(r, root);
    b.t.subnet = fmt::format("{}/{}", format_ipv4(b.subnet.net), b.subnet.prefix);
    b.t.prefix_len = b.subnet.prefix;
    b.t.mtu = parse_mtu(r, root);
    // Switches first, then hosts: the node index (and so every MAC) depends
    // only on the file.
    b.add_nodes(root, "switches", NodeKind::Switch);
    b.add_nodes(root, "hosts", NodeKind::Host);
    if (!root["links"].IsDefined())
        r.fail(root, "", "missing required key 'links'");
    b.add_links(root["links"]);
    b.address_hosts();
    b.apply_host_overrides(root["hosts"]);
    b.add_jobs(root["jobs"]);
    parse_routing(r, root, b.t);
    return std::move(b.t);
}

} // namespace

const char *topology_kind_name(TopologyKind k) {
    return k == TopologyKind::Mesh ? "mesh" : "switched";
}

const char *job_kind_name(JobKind k) {
    if (k == JobKind::Tree)
        return "tree";
    return k == JobKind::RoceTree ? "roce-tree" : "star";
}

const char *host_order_name(HostOrder o) {
    return o == HostOrder::Any ? "any" : "strict";
}

std::string mac_to_string(const Mac &m) {
    return util::format_mac(m);
}

Mac mac_from_string(const std::string &s) {
    try {
        return util::mac_or_throw(s);
    } catch (const std::invalid_argument &e) {
        throw TopologyError(e.what());
    }
}

Topology Topology::load_file(const std::string &path) {
    std::ifstream in(path);
    if (!in)
        throw TopologyError(
            fmt::format("cannot read topology file {}: {}", path, std::strerror(errno)));
    std::ostringstream ss;
    ss << in.rdbuf();
    // SMI's cabling files (JSON, or `A - B` lines) are mesh topologies too.
    if (smi::is_cabling_file(path, ss.str()))
        return smi::to_topology(smi::parse_cabling(ss.str(), path), smi::topology_name(path));
    return parse_text(ss.str(), path);
}

Topology Topology::parse(const std::string &yaml) {
    return parse_text(yaml, "<topology>");
}

const Node &Topology::node(const std::string &n) const {
    for (const Node &x : nodes)
        if (x.name == n)
            return x;
    throw TopologyError(fmt::format("topology {} has no node '{}'", name, n));
}

const Job &Topology::job(uint32_t id) const {
    for (const Job &j : jobs)
        if (j.id == id)
            return j;
    throw TopologyError(fmt::format("topology {} has no job {}", name, id));
}

namespace {
const Iface &iface_towards(const Topology &t, const std::string &from, NodeKind kind,
                           const std::string &to) {
    const Node &n = t.node(from);
    if (n.kind != kind)
        throw TopologyError(fmt::format("topology {}: '{}' is not a {}", t.name, from,
                                        kind == NodeKind::Host ? "host" : "switch"));
    for (const Iface &i : n.ifaces)
        if (i.peer_node == to)
            return i;
    throw TopologyError(
        fmt::format("topology {}: no link between '{}' and '{}'", t.name, from, to));
}
} // namespace

const Iface &Topology::switch_port_for(const std::string &sw, const std::string &host) const {
    return iface_towards(*this, sw, NodeKind::Switch, host);
}

const Iface &Topology::host_iface_for(const std::string &host, const std::string &sw) const {
    return iface_towards(*this, host, NodeKind::Host, sw);
}

std::string netns_name(const std::string &prefix, const std::string &node) {
    // The name becomes a file under /var/run/netns and an `ip netns` argument.
    const bool ok = !prefix.empty() && prefix.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                                                "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                                "0123456789_.-") == prefix.npos;
    if (!ok)
        throw TopologyError(fmt::format(
            "bad namespace prefix '{}': use one or more characters from [A-Za-z0-9_.-]", prefix));
    std::string n = prefix + node;
    if (n.size() > kMaxNetnsName)
        throw TopologyError(
            fmt::format("namespace name '{}' is longer than {} characters", n, kMaxNetnsName));
    return n;
}

} // namespace incxdp::topo
