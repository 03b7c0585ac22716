// SPDX-License-Identifier: BSD-2-Clause
// What the mesh daemon needs of the XDP relay (loader/include/incxdp/
// relay_ctl.h): attach, detach, its config and routes. One narrow seam so
// the daemon also runs without XDP (`--no-xdp`: discovery and routes only).
#pragma once

#include "mesh_graph.h"

#include <incxdp/relay.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace incxdp::mesh {

class RelayPort {
  public:
    virtual ~RelayPort() = default;
    virtual void set_config(NodeId self, bool relay_enabled, uint32_t max_hops) = 0;
    virtual void set_route(NodeId dst, const incxdp_relay_route &r) = 0;
    virtual void del_route(NodeId dst) = 0;
};

// Attaches the relay to the interfaces and opens its maps; destroying the
// result detaches it and removes its pins.
std::unique_ptr<RelayPort> attach_relay(const std::string &pin_dir,
                                        const std::vector<std::string> &ifaces,
                                        const std::string &mode);
// Writes nothing anywhere.
std::unique_ptr<RelayPort> null_relay();

std::string relay_default_pin_dir();
// The relay's counters in pin_dir, by name (relay.h incxdp_relay_stat).
std::vector<std::pair<std::string, uint64_t>> relay_stats(const std::string &pin_dir);

} // namespace incxdp::mesh
