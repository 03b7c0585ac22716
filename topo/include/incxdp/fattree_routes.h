// SPDX-License-Identifier: BSD-2-Clause
// Up/down IP routing through the switch namespaces of a topology with
// `routing: updown` (a fat-tree or leaf-spine from `incxdp topo gen`), so
// ordinary host-to-host traffic crosses the switches as htsim routes it:
// down when the destination is below, else up, ECMP by L4 flow hash
// (docs/FATTREE.md). updown_routes() is pure; install_updown_routes() is
// what `topo up` runs.
#pragma once

#include <incxdp/netns.h>
#include <incxdp/topology.h>

#include <map>
#include <set>
#include <string>
#include <vector>

namespace incxdp::topo {

/// Tier of every node: 0 for a host, else 1 + the fewest switch hops to a
/// host (fat-tree: ToR 1, Agg 2, core 3). Throws TopologyError naming a
/// node that reaches no host.
std::map<std::string, int> node_tiers(const Topology &t);

/// The hosts each switch reaches going down only (through neighbours one
/// tier lower each hop): a ToR its hosts, an Agg its pod, a core them all.
std::map<std::string, std::set<std::string>> hosts_below(const Topology &t,
                                                         const std::map<std::string, int> &tiers);

struct NextHop {
    std::string iface; ///< outgoing port
    std::string
        gateway; ///< the next switch's service address; empty: the destination is on the link
};

struct Route {
    std::string dst;          ///< a.b.c.d/len
    std::vector<NextHop> via; ///< more than one: ECMP
};

/// A permanent neighbour entry: no ARP anywhere, every MAC comes from the file.
struct Neighbour {
    std::string iface, ip, mac;
};

struct SwitchRoutes {
    std::string sw;
    int tier = 0;
    std::vector<std::string> below;    ///< hosts reachable going down only, file order
    std::vector<Neighbour> neighbours; ///< one per port: the peer's address and MAC
    std::vector<Route> routes;         ///< /32 down per host below, then the subnet up
};

struct HostRoute {
    std::string host, iface, gateway; ///< the subnet via gateway (its leaf switch) onlink
};

struct UpdownRoutes {
    std::vector<SwitchRoutes> switches; ///< file order
    std::vector<HostRoute> hosts;       ///< file order
};

/// A switch routes each host below it down, over every lower neighbour
/// that has it below (ECMP when several), and the rest of the subnet up,
/// ECMP over every higher neighbour. Throws TopologyError when a switch
/// has hosts that are neither below it nor reachable up, or on host-host
/// links.
UpdownRoutes updown_routes(const Topology &t);

/// Installs updown_routes() in the namespaces of a topology that is up
/// under `prefix`: in each switch IPv4 forwarding, L4 multipath hashing,
/// rp_filter off, the neighbours and routes (one `ip -batch`); on each host
/// the subnet route via its leaf switch. Throws NetnsError.
void install_updown_routes(const Topology &t, const std::string &prefix,
                           const Progress &progress = {});

} // namespace incxdp::topo
