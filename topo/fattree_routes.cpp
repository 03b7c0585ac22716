// SPDX-License-Identifier: BSD-2-Clause
// Up/down routes (fattree_routes.h): computed from the file, installed with
// one `ip -batch` per switch namespace.
#include "incxdp/fattree_routes.h"
#include "process.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <set>
#include <unistd.h>

namespace incxdp::topo {
namespace {

const Iface &iface_named(const Node &n, const std::string &name) {
    for (const Iface &i : n.ifaces)
        if (i.name == name)
            return i;
    throw TopologyError(fmt::format("node '{}' has no interface '{}'", n.name, name));
}

std::string where(const Topology &t) {
    return fmt::format("topology {}: routing updown", t.name);
}

constexpr const char *kPolicy = "/proc/sys/net/ipv4/fib_multipath_hash_policy";
constexpr const char *kFields = "/proc/sys/net/ipv4/fib_multipath_hash_fields";
constexpr const char *kSeed = "/proc/sys/net/ipv4/fib_multipath_hash_seed";
// Source and destination address, protocol, source and destination port
// (FIB_MULTIPATH_HASH_FIELD_*).
constexpr const char *kFiveTuple = "55"; // 0x37

// Writes one /proc/sys value in the calling process's namespace.
void write_sysctl(const std::string &path, const char *value) {
    std::ofstream f(path);
    if (!(f << value << "\n") || !f.flush())
        throw NetnsError(fmt::format("write {} to {}: {}", value, path, std::strerror(errno)));
}

std::string nexthops(const std::vector<NextHop> &via) {
    auto one = [](const NextHop &h) {
        return h.gateway.empty() ? fmt::format("dev {}", h.iface)
                                 : fmt::format("via {} dev {} onlink", h.gateway, h.iface);
    };
    if (via.size() == 1)
        return one(via[0]);
    std::string s;
    for (const NextHop &h : via)
        s += (s.empty() ? "nexthop " : " nexthop ") + one(h);
    return s;
}

// A temporary file holding one switch's `ip -batch` commands.
class BatchFile {
  public:
    explicit BatchFile(const std::string &text) {
        char tmpl[] = "/tmp/incxdp-updown-XXXXXX";
        const int fd = mkstemp(tmpl);
        if (fd < 0)
            throw NetnsError(fmt::format("create {}: {}", tmpl, std::strerror(errno)));
        path_ = tmpl;
        const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
        ::close(fd);
        if (!ok)
            throw NetnsError(fmt::format("write {}: {}", path_, std::strerror(errno)));
    }
    ~BatchFile() { ::unlink(path_.c_str()); }
    BatchFile(const BatchFile &) = delete;
    BatchFile &operator=(const BatchFile &) = delete;
    const std::string &path() const { return path_; }

  private:
    std::string path_;
};

} // namespace

std::map<std::string, int> node_tiers(const Topology &t) {
    std::map<std::string, int> tier;
    std::deque<const Node *> q;
    for (const Node &n : t.nodes)
        if (n.kind == NodeKind::Host) {
            tier[n.name] = 0;
            q.push_back(&n);
        }
    // Breadth-first from every host at once: a switch's tier is its distance
    // to the nearest host.
    while (!q.empty()) {
        const Node *n = q.front();
        q.pop_front();
        for (const Iface &i : n->ifaces)
            if (!tier.count(i.peer_node)) {
                tier[i.peer_node] = tier[n->name] + 1;
                q.push_back(&t.node(i.peer_node));
            }
    }
    for (const Node &n : t.nodes)
        if (!tier.count(n.name))
            throw TopologyError(
                fmt::format("{}: switch '{}' is not connected to any host", where(t), n.name));
    return tier;
}

std::map<std::string, std::set<std::string>> hosts_below(const Topology &t,
                                                         const std::map<std::string, int> &tier) {
    std::map<std::string, std::set<std::string>> below;
    std::vector<const Node *> by_tier;
    for (const Node &n : t.nodes)
        if (n.kind == NodeKind::Switch)
            by_tier.push_back(&n);
    std::stable_sort(by_tier.begin(), by_tier.end(), [&](const Node *a, const Node *b) {
        return tier.at(a->name) < tier.at(b->name);
    });
    // Lower tiers first, so every lower neighbour's set is complete.
    for (const Node *s : by_tier) {
        auto &mine = below[s->name];
        for (const Iface &i : s->ifaces) {
            if (tier.at(i.peer_node) != tier.at(s->name) - 1)
                continue;
            if (tier.at(i.peer_node) == 0)
                mine.insert(i.peer_node);
            else
                mine.insert(below[i.peer_node].begin(), below[i.peer_node].end());
        }
    }
    return below;
}

UpdownRoutes updown_routes(const Topology &t) {
    const auto tier = node_tiers(t);
    const auto below = hosts_below(t, tier);
    std::map<std::string, size_t> host_pos;
    for (const Node &n : t.nodes)
        if (n.kind == NodeKind::Host)
            host_pos.emplace(n.name, host_pos.size());

    UpdownRoutes out;
    for (const Node &s : t.nodes) {
        if (s.kind != NodeKind::Switch)
            continue;
        SwitchRoutes sr;
        sr.sw = s.name;
        sr.tier = tier.at(s.name);
        std::vector<NextHop> up;
        for (const Iface &i : s.ifaces) {
            const Node &peer = t.node(i.peer_node);
            sr.neighbours.push_back(
                {i.name, peer.ip, mac_to_string(iface_named(peer, i.peer_iface).mac)});
            if (tier.at(peer.name) == sr.tier + 1)
                up.push_back({i.name, peer.ip});
        }
        const auto &mine = below.at(s.name);
        for (const Node &h : t.nodes) {
            if (h.kind != NodeKind::Host || !mine.count(h.name))
                continue;
            sr.below.push_back(h.name);
            Route r{h.ip + "/32", {}};
            for (const Iface &i : s.ifaces) {
                const int pt = tier.at(i.peer_node);
                if (pt == 0 && i.peer_node == h.name)
                    r.via.push_back({i.name, ""});
                else if (pt == sr.tier - 1 && pt > 0 && below.at(i.peer_node).count(h.name))
                    r.via.push_back({i.name, t.node(i.peer_node).ip});
            }
            sr.routes.push_back(std::move(r));
        }
        if (mine.size() < host_pos.size()) {
            if (up.empty()) {
                std::string missing;
                for (const auto &[h, pos] : host_pos)
                    if (!mine.count(h)) {
                        missing = h;
                        break;
                    }
                throw TopologyError(fmt::format(
                    "{}: switch '{}' has no link to a higher tier, yet host '{}' is not below it "
                    "(up/down routing needs every switch to reach every host)",
                    where(t), s.name, missing));
            }
            sr.routes.push_back({t.subnet, up});
        }
        out.switches.push_back(std::move(sr));
    }
    for (const Node &h : t.nodes) {
        if (h.kind != NodeKind::Host)
            continue;
        if (h.ifaces.empty())
            throw TopologyError(fmt::format("{}: host '{}' has no link", where(t), h.name));
        for (const Iface &i : h.ifaces)
            if (t.node(i.peer_node).kind == NodeKind::Host)
                throw TopologyError(fmt::format(
                    "{}: hosts '{}' and '{}' are linked directly; up/down routing needs every "
                    "host below a switch",
                    where(t), h.name, i.peer_node));
        // A multi-homed host sends through its first switch, as its address
        // lives on its first interface.
        out.hosts.push_back({h.name, h.ifaces[0].name, t.node(h.ifaces[0].peer_node).ip});
    }
    return out;
}

void install_updown_routes(const Topology &t, const std::string &prefix, const Progress &progress) {
    UpdownRoutes r;
    try {
        r = updown_routes(t);
    } catch (const TopologyError &e) {
        throw NetnsError(e.what());
    }
    auto step = [&](const std::string &s) {
        if (progress)
            progress(s);
    };
    uint32_t seq = 0;
    for (const SwitchRoutes &sr : r.switches) {
        const Node &s = t.node(sr.sw);
        const std::string ns = netns_name(prefix, sr.sw);
        const std::string ctx =
            fmt::format("topology {}: switch {} (namespace {}): updown routes", t.name, sr.sw, ns);
        std::string batch;
        for (const Neighbour &n : sr.neighbours)
            batch += fmt::format("neigh replace {} lladdr {} dev {} nud permanent\n", n.ip, n.mac,
                                 n.iface);
        for (const Route &rt : sr.routes)
            batch += fmt::format("route replace {} {}\n", rt.dst, nexthops(rt.via));
        step(fmt::format("routes {}: forwarding, {} neighbours, {} routes", sr.sw,
                         sr.neighbours.size(), sr.routes.size()));
        const BatchFile file(batch);
        // Deterministic, distinct per switch, never 0 (0 = no seed).
        const std::string seed = std::to_string(0x9e3779b9u * static_cast<uint32_t>(seq++ + 1));
        detail::in_netns(
            ns,
            [&] {
                write_sysctl("/proc/sys/net/ipv4/ip_forward", "1");
                // ECMP by the 5-tuple, as htsim's per-flow ECMP. Not policy 1:
                // it reuses the hash a TCP socket put on the skb, which veth
                // carries to every hop, so a ToR's choice of Agg would fix the
                // Agg's choice of core (half the cores idle). Policy 3 hashes
                // the fields named, with this switch's own seed.
                if (access(kFields, F_OK) == 0) {
                    write_sysctl(kFields, kFiveTuple);
                    write_sysctl(kPolicy, "3");
                } else {
                    write_sysctl(kPolicy, "1");
                }
                if (access(kSeed, F_OK) == 0)
                    write_sysctl(kSeed, seed.c_str());
                // The kernel takes max(all, dev): every copy must be 0, and a
                // new namespace may inherit a non-zero default.
                write_sysctl("/proc/sys/net/ipv4/conf/all/rp_filter", "0");
                write_sysctl("/proc/sys/net/ipv4/conf/default/rp_filter", "0");
                for (const Iface &i : s.ifaces)
                    write_sysctl("/proc/sys/net/ipv4/conf/" + i.name + "/rp_filter", "0");
                detail::run_ok({"ip", "-batch", file.path()}, "ip -batch " + file.path());
            },
            ctx);
    }
    for (const HostRoute &h : r.hosts) {
        const std::string ns = netns_name(prefix, h.host);
        step(
            fmt::format("route {}: {} via {} dev {} onlink", h.host, t.subnet, h.gateway, h.iface));
        // Replaces the connected subnet route: the host sends everything to
        // its leaf switch, whose address it already has a permanent
        // neighbour entry for, and never ARPs.
        detail::run_ok(
            {"ip", "-n", ns, "route", "replace", t.subnet, "via", h.gateway, "dev", h.iface,
             "onlink"},
            fmt::format("topology {}: host {} (namespace {}): updown route", t.name, h.host, ns));
    }
}

} // namespace incxdp::topo
