// SPDX-License-Identifier: BSD-2-Clause
// An interface's MAC and MTU in this process's network namespace, read with
// ioctl: /sys/class/net shows the namespace sysfs was mounted in.
#pragma once

#include "incxdp/util/mac.h"

#include <cstdint>
#include <optional>
#include <string>

namespace incxdp::util {

/// nullopt with errno set if the interface cannot be read.
std::optional<Mac> iface_mac(const std::string &ifname);
std::optional<uint32_t> iface_mtu(const std::string &ifname);

} // namespace incxdp::util
