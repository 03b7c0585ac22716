// SPDX-License-Identifier: BSD-2-Clause
// Interface lookups in the calling process's network namespace.
#pragma once

#include <incxdp/topology.h>

#include <cstdint>
#include <string>

namespace incxdp::ctl {

// Throws CtlError("unknown interface 'X'") if it does not exist here.
uint32_t ifindex_of(const std::string &name);
// "ifindex N" if it has no name here.
std::string ifname_of(uint32_t ifindex);
// The interface's MAC (SIOCGIFHWADDR: sysfs would show the mount's netns).
topo::Mac mac_of(const std::string &name);
// An IPv4 address in network order, as map entries hold it; throws
// CtlError("<what>: 'X' is not an IPv4 address").
uint32_t be_ip(const std::string &text, const std::string &what);

} // namespace incxdp::ctl
