// SPDX-License-Identifier: BSD-2-Clause
#include "cm_counters.h"

#include "process.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <sys/stat.h>

namespace incxdp::cm {

Counters read_counters(const topo::Topology &t, const std::string &prefix) {
    Counters c;
    for (const topo::Node &n : t.nodes) {
        const std::string ns = topo::netns_name(prefix, n.name);
        struct stat st {};
        if (::stat(("/var/run/netns/" + ns).c_str(), &st) != 0)
            continue;
        auto r = topo::detail::run({"ip", "-n", ns, "-j", "-s", "link", "show"});
        if (r.status != 0)
            continue;
        auto j = nlohmann::json::parse(r.out, nullptr, false);
        if (!j.is_array())
            continue;
        for (const auto &l : j) {
            if (!l.contains("ifname") || !l.contains("stats64"))
                continue;
            c[n.name + "/" + l["ifname"].get<std::string>()] =
                l["stats64"]["tx"]["bytes"].get<uint64_t>();
        }
    }
    return c;
}

std::string node_role(const topo::Node &n) {
    if (n.kind == topo::NodeKind::Host)
        return "host";
    std::string r = n.name;
    while (!r.empty() && (std::isdigit(static_cast<unsigned char>(r.back())) || r.back() == '-' ||
                          r.back() == '_'))
        r.pop_back();
    return r.empty() ? "switch" : r;
}

namespace {

int role_rank(const std::string &role) {
    static const char *const kOrder[] = {"host", "tor", "leaf", "agg", "spine", "core"};
    auto it = std::find(std::begin(kOrder), std::end(kOrder), role);
    return it == std::end(kOrder) ? 100 : static_cast<int>(it - std::begin(kOrder));
}

uint64_t delta(const Counters &before, const Counters &after, const std::string &key) {
    auto a = after.find(key), b = before.find(key);
    if (a == after.end() || b == before.end() || a->second < b->second)
        return 0;
    return a->second - b->second;
}

} // namespace

std::vector<LinkBytes> link_bytes(const topo::Topology &t, const Counters &before,
                                  const Counters &after) {
    std::vector<LinkBytes> out;
    for (const topo::Link &l : t.links) {
        const topo::Node &a = t.node(l.a), &b = t.node(l.b);
        LinkBytes lb{l.a, l.b, "", 0, 0};
        std::string ra = node_role(a), rb = node_role(b);
        if (role_rank(ra) > role_rank(rb) || (role_rank(ra) == role_rank(rb) && ra > rb))
            std::swap(ra, rb);
        lb.tier = ra + "-" + rb;
        for (const topo::Iface &i : a.ifaces)
            if (i.peer_node == b.name)
                lb.a_to_b = delta(before, after, a.name + "/" + i.name);
        for (const topo::Iface &i : b.ifaces)
            if (i.peer_node == a.name)
                lb.b_to_a = delta(before, after, b.name + "/" + i.name);
        out.push_back(lb);
    }
    return out;
}

} // namespace incxdp::cm
