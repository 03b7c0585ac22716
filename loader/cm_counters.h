// SPDX-License-Identifier: BSD-2-Clause
// Bytes on every link of a topology during a replay: each interface's
// tx_bytes (as `ip -s link` reads them from its namespace) before and
// after, per direction, grouped into tiers by the node names' roles
// (`h3` host, `tor1`, `agg0`, `core2`: tier "tor-agg", ...).
#pragma once

#include <incxdp/topology.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace incxdp::cm {

/// tx_bytes per "<node>/<iface>", for every node whose namespace exists.
using Counters = std::map<std::string, uint64_t>;
Counters read_counters(const topo::Topology &t, const std::string &prefix);

struct LinkBytes {
    std::string a, b; ///< node names, as in the topology's `links`
    std::string tier; ///< e.g. "host-tor", "tor-agg", "agg-core"
    uint64_t a_to_b = 0, b_to_a = 0;
};

/// The role of a node: "host" for hosts, else its name without trailing
/// digits ("tor", "agg", "core", "sw").
std::string node_role(const topo::Node &n);

/// Per link, in the topology's order: after - before.
std::vector<LinkBytes> link_bytes(const topo::Topology &t, const Counters &before,
                                  const Counters &after);

} // namespace incxdp::cm
