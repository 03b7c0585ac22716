// SPDX-License-Identifier: BSD-2-Clause
// The XDP hook of `incxdp chaos` (chaos_xdp.cpp): rates and counters in the
// maps of the incxdp XDP program on an interface, reached through the
// program. chaos_ctl.cpp dispatches Hook::Xdp here.
#pragma once

#include <incxdp/chaos_ctl.h>

#include <string>
#include <vector>

namespace incxdp::ctl::chaos {
// Counters from per-CPU sums indexed by enum incxdp_chaos_stat (both hooks).
Counters counters_from(const uint64_t (&sum)[INCXDP_CHAOS_STAT_MAX]);
// The rates an update gives replace those in c, the others stay; enabled.
void apply_update(const RateUpdate &u, incxdp_chaos_config &c);
} // namespace incxdp::ctl::chaos

namespace incxdp::ctl::chaos::xdp {

HookStatus set(const std::string &iface, const RateUpdate &update);
// Throws "not set" when the interface has no rates.
void off(const std::string &iface);
void reset_counters(const std::string &iface);
// attached = rates are set for the interface.
HookStatus status(const std::string &iface);
// Interfaces of this namespace with rates set.
std::vector<std::string> configured();

} // namespace incxdp::ctl::chaos::xdp
