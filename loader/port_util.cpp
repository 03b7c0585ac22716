// SPDX-License-Identifier: BSD-2-Clause
#include "port_util.h"
#include "pinned_maps.h"

#include <incxdp/util/iface.h>
#include <incxdp/util/ipv4.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace incxdp::ctl {

uint32_t ifindex_of(const std::string &name) {
    if (name.empty() || name.size() >= IF_NAMESIZE)
        throw CtlError(fmt::format("invalid interface name '{}'", name));
    unsigned idx = if_nametoindex(name.c_str());
    if (!idx)
        throw CtlError(fmt::format("unknown interface '{}' (in this network namespace)", name));
    return idx;
}

std::string ifname_of(uint32_t ifindex) {
    char buf[IF_NAMESIZE] = {};
    if (!if_indextoname(ifindex, buf))
        return fmt::format("ifindex {}", ifindex);
    return buf;
}

topo::Mac mac_of(const std::string &name) {
    auto mac = util::iface_mac(name);
    if (!mac)
        throw CtlError(errno_msg(fmt::format("cannot read the MAC address of {}", name), errno));
    return *mac;
}

uint32_t be_ip(const std::string &text, const std::string &what) {
    if (auto a = util::parse_ipv4_be(text))
        return *a;
    throw CtlError(fmt::format("{}: '{}' is not an IPv4 address", what, text));
}

} // namespace incxdp::ctl
