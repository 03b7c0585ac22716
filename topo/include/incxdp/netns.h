// SPDX-License-Identifier: BSD-2-Clause
// Bringing a Topology up as network namespaces joined by veth pairs, taking
// it down again, and reporting what is actually there. Every node N becomes
// the namespace `prefix + N` (netns_name()); see docs/TOPOLOGY.md.
// All three need root (CAP_NET_ADMIN and CAP_SYS_ADMIN) except status().
#pragma once

#include "incxdp/topology.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace incxdp::topo {

// A failed namespace or link operation; the message names the command or
// object and carries the kernel's or ip(8)'s reason.
struct NetnsError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Called before each step of up() with a one-line description, e.g.
// "link w0:eth0 <-> sw:p-w0". Used for -v output; an exception thrown from
// it aborts up() like any failure (the tests use that to check rollback).
using Progress = std::function<void(const std::string &step)>;

// Creates every namespace, veth pair, MAC, MTU, host address, the hosts'
// permanent neighbour entry for each linked switch's service address, and
// attaches the XDP_PASS program (native mode) on every host interface.
// IPv6 is disabled in each namespace so the links carry only our traffic.
// A mesh (TopologyKind::Mesh) gets each interface's own address (Iface::ip)
// instead, no neighbour entries, and rp_filter off in every namespace.
// All-or-nothing: on failure (or SIGINT/SIGTERM/SIGHUP, which are held
// back until it returns) the namespaces it created are removed before the
// error is thrown. Refuses, changing nothing, if any namespace of the
// topology already exists.
void up(const Topology &topo, const std::string &prefix, const Progress &progress = {});

// Removes the topology's namespaces (and with them their veths and XDP
// programs); ones that do not exist are skipped. Never touches any other
// namespace. Returns how many were removed.
size_t down(const Topology &topo, const std::string &prefix);

struct XdpStatus {
    uint32_t id = 0;  // 0: no program attached
    std::string name; // program name as the kernel knows it
    std::string mode; // "native", "generic", "offload" or "multi"
};

struct IfaceStatus {
    std::string name; // from the topology
    bool exists = false;
    bool up = false;       // administratively up (IFF_UP)
    std::string operstate; // e.g. "UP", "DOWN", "LOWERLAYERDOWN"
    std::string mac;       // actual address, empty if missing
    int mtu = 0;
    std::vector<std::string> addrs; // IPv4, "a.b.c.d/len"
    XdpStatus xdp;
};

struct NodeStatus {
    std::string name;
    NodeKind kind = NodeKind::Host;
    std::string netns;
    bool exists = false;
    std::vector<IfaceStatus> ifaces; // the topology's interfaces, in its order
};

struct TopologyStatus {
    std::string topology;
    std::string prefix;
    std::vector<NodeStatus> nodes; // the topology's nodes, in its order

    size_t namespaces_present() const;
    // "up": every namespace and interface exists and is up; "down": no
    // namespace exists; "partial": anything in between.
    std::string state() const;
};

// What exists now. Reads /var/run/netns and `ip -n NS -j addr`; changes nothing.
TopologyStatus status(const Topology &topo, const std::string &prefix);

} // namespace incxdp::topo
