// SPDX-License-Identifier: BSD-2-Clause
// Parsing, validation and the deterministic derivations of topology.h.
// docs/TOPOLOGY.md is the user-facing description of the same rules.
#include "incxdp/topology.h"
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

using detail::YamlReader;

// Jumbo frames. Every XDP program we attach is xdp.frags, which veth takes at
// any MTU (a plain one only up to 3506: frame, headroom and skb_shared_info
// in one 4 KiB page); what the engine handles is still one buffer (~3.5 KB
// frames), larger ones it counts as too_long. 9000 is what we test.
constexpr int kMaxMtu = 9000;
constexpr int kMinMtu = 68; // IPv4 minimum, also veth's min_mtu
// "p-" + name must fit IFNAMSIZ-1 = 15 and the MAC has one byte per index.
constexpr size_t kMaxNodeName = 12;
constexpr size_t kMaxIfName = 15;
constexpr size_t kMaxIndex = 256;
constexpr size_t kMaxNetnsName = 32;
constexpr int64_t kRocePsnMask = 0xFFFFFF;

bool valid_name(const std::string &s, size_t max_len) {
    if (s.empty() || s.size() > max_len)
        return false;
    for (char c : s)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return false;
    return true;
}

std::optional<uint32_t> parse_ipv4(const std::string &s) {
    in_addr a{};
    if (inet_pton(AF_INET, s.c_str(), &a) != 1)
        return std::nullopt;
    return ntohl(a.s_addr);
}

std::string format_ipv4(uint32_t host_order) {
    return fmt::format("{}.{}.{}.{}", host_order >> 24, (host_order >> 16) & 0xff,
                       (host_order >> 8) & 0xff, host_order & 0xff);
}

struct Subnet {
    uint32_t net = 0, mask = 0;
    int prefix = 0;
    bool contains(uint32_t ip) const { return (ip & mask) == net; }
    // The network and broadcast addresses are not usable by a node.
    bool usable(uint32_t ip) const { return contains(ip) && ip != net && ip != (net | ~mask); }
};

Subnet parse_subnet(const YamlReader &r, const YAML::Node &root) {
    const std::string s = r.str(root, "subnet", "");
    const YAML::Node at = root["subnet"];
    const auto slash = s.find('/');
    const auto ip = parse_ipv4(s.substr(0, slash));
    if (slash == std::string::npos || !ip)
        r.fail(at, "subnet", fmt::format("bad CIDR '{}': expected a.b.c.d/len", s));
    const std::string len = s.substr(slash + 1);
    int prefix = -1;
    if (!len.empty() && len.size() <= 2 && len.find_first_not_of("0123456789") == len.npos)
        prefix = std::stoi(len);
    // /31 and /32 leave no room for hosts next to the switch address.
    if (prefix < 1 || prefix > 30)
        r.fail(at, "subnet", fmt::format("bad CIDR '{}': prefix length must be 1..30", s));
    Subnet sn;
    sn.prefix = prefix;
    sn.mask = ~uint32_t{0} << (32 - prefix);
    sn.net = *ip & sn.mask;
    if (sn.net != *ip)
        r.fail(at, "subnet",
               fmt::format("bad CIDR '{}': host bits set (did you mean {}/{}?)", s,
                           format_ipv4(sn.net), prefix));
    return sn;
}

int parse_mtu(const YamlReader &r, const YAML::Node &root) {
    const auto mtu = r.integer(root, "mtu", "", INCXDP_LINK_MTU, kMinMtu, INT32_MAX);
    if (mtu > kMaxMtu)
        r.fail(root["mtu"], "mtu",
               fmt::format("{} is above {}, the largest (jumbo) MTU incxdp supports", mtu,
                           kMaxMtu));
    return static_cast<int>(mtu);
}

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
            if (!l.IsSequence() || l.size() != 2)
                r.fail(l, where, "expected a pair of node names, e.g. [w0, sw]");
            Link link{r.scalar(l[0], where), r.scalar(l[1], where)};
            for (const auto &[name, at] : {std::pair{link.a, l[0]}, std::pair{link.b, l[1]}})
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
            t.nodes[ia].ifaces[ka].peer_iface = t.nodes[ib].ifaces[kb].name;
            t.nodes[ib].ifaces[kb].peer_iface = t.nodes[ia].ifaces[ka].name;
            t.links.push_back(std::move(link));
        }
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
                    r.fail(j[key], where,
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
        r.fail(k, where, fmt::format("unknown job kind '{}' (expected star or roce-tree)", s));
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
    r.expect_map(root, "", {"name", "subnet", "mtu", "switches", "hosts", "links", "jobs"});

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
    b.add_jobs(root["jobs"]);
    return std::move(b.t);
}

} // namespace

const char *job_kind_name(JobKind k) {
    return k == JobKind::RoceTree ? "roce-tree" : "star";
}

const char *host_order_name(HostOrder o) {
    return o == HostOrder::Any ? "any" : "strict";
}

std::string mac_to_string(const Mac &m) {
    return fmt::format("{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4],
                       m[5]);
}

Mac mac_from_string(const std::string &s) {
    Mac m{};
    auto hex = [](char c) -> int {
        if (c >= '0' && c <= '9')
            return c - '0';
        if (c >= 'a' && c <= 'f')
            return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
            return c - 'A' + 10;
        return -1;
    };
    bool ok = s.size() == 17;
    for (size_t i = 0; ok && i < 6; ++i) {
        const int hi = hex(s[3 * i]), lo = hex(s[3 * i + 1]);
        ok = hi >= 0 && lo >= 0 && (i == 5 || s[3 * i + 2] == ':');
        m[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
    if (!ok)
        throw TopologyError(
            fmt::format("bad MAC address '{}': expected six hex bytes like 02:49:58:00:01:00", s));
    return m;
}

Topology Topology::load_file(const std::string &path) {
    std::ifstream in(path);
    if (!in)
        throw TopologyError(
            fmt::format("cannot read topology file {}: {}", path, std::strerror(errno)));
    std::ostringstream ss;
    ss << in.rdbuf();
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
