// SPDX-License-Identifier: BSD-2-Clause
// status() of netns.h: what `ip -j addr` reports in each namespace.
#include "incxdp/netns.h"
#include "process.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <sys/stat.h>

namespace incxdp::topo {
namespace {

using nlohmann::json;

// ip(8)'s numbering of XDP_ATTACHED_* (linux/if_link.h).
std::string xdp_mode(int mode) {
    switch (mode) {
    case 1:
        return "native";
    case 2:
        return "generic";
    case 3:
        return "offload";
    case 4:
        return "multi";
    default:
        return fmt::format("mode {}", mode);
    }
}

XdpStatus parse_xdp(const json &link) {
    XdpStatus x;
    if (!link.contains("xdp"))
        return x;
    const json &xdp = link["xdp"];
    x.mode = xdp_mode(xdp.value("mode", 0));
    // In "multi" mode there is no single "prog", only the "attached" list.
    const json *prog = xdp.contains("prog") ? &xdp["prog"] : nullptr;
    if (!prog && xdp.contains("attached") && !xdp["attached"].empty())
        prog = &xdp["attached"][0]["prog"];
    if (prog) {
        x.id = prog->value("id", 0u);
        x.name = prog->value("name", "");
    }
    return x;
}

IfaceStatus parse_iface(const json &link) {
    IfaceStatus s;
    s.exists = true;
    s.name = link.value("ifname", "");
    const auto flags = link.value("flags", std::vector<std::string>{});
    s.up = std::find(flags.begin(), flags.end(), "UP") != flags.end();
    s.operstate = link.value("operstate", "");
    s.mac = link.value("address", "");
    s.mtu = link.value("mtu", 0);
    for (const json &a : link.value("addr_info", json::array()))
        if (a.value("family", "") == "inet")
            s.addrs.push_back(fmt::format("{}/{}", a.value("local", ""), a.value("prefixlen", 0)));
    s.xdp = parse_xdp(link);
    return s;
}

NodeStatus node_status(const Node &n, const std::string &prefix) {
    NodeStatus ns;
    ns.name = n.name;
    ns.kind = n.kind;
    ns.netns = netns_name(prefix, n.name);
    struct stat st {};
    ns.exists = stat(("/var/run/netns/" + ns.netns).c_str(), &st) == 0;
    json links = json::array();
    if (ns.exists) {
        const std::string out = detail::run_ok({"ip", "-n", ns.netns, "-j", "addr", "show"},
                                               "status of namespace " + ns.netns);
        try {
            links = json::parse(out);
        } catch (const json::exception &e) {
            throw NetnsError(fmt::format("status of namespace {}: cannot parse `ip -j addr` "
                                         "output: {}",
                                         ns.netns, e.what()));
        }
    }
    for (const Iface &i : n.ifaces) {
        IfaceStatus s;
        s.name = i.name;
        for (const json &l : links)
            if (l.value("ifname", "") == i.name)
                s = parse_iface(l);
        ns.ifaces.push_back(std::move(s));
    }
    return ns;
}

} // namespace

size_t TopologyStatus::namespaces_present() const {
    return static_cast<size_t>(
        std::count_if(nodes.begin(), nodes.end(), [](const NodeStatus &n) { return n.exists; }));
}

std::string TopologyStatus::state() const {
    if (namespaces_present() == 0)
        return "down";
    for (const NodeStatus &n : nodes) {
        if (!n.exists)
            return "partial";
        for (const IfaceStatus &i : n.ifaces)
            if (!i.exists || !i.up)
                return "partial";
    }
    return "up";
}

TopologyStatus status(const Topology &t, const std::string &prefix) {
    TopologyStatus s;
    s.topology = t.name;
    s.prefix = prefix;
    for (const Node &n : t.nodes)
        s.nodes.push_back(node_status(n, prefix));
    return s;
}

} // namespace incxdp::topo
