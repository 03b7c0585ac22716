// SPDX-License-Identifier: BSD-2-Clause
#include "port_util.h"
#include "pinned_maps.h"

#include <incxdp/util/ipv4.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

namespace incxdp::ctl {

uint32_t ifindex_of(const std::string &name)
{
    if (name.empty() || name.size() >= IF_NAMESIZE)
        throw CtlError(fmt::format("invalid interface name '{}'", name));
    unsigned idx = if_nametoindex(name.c_str());
    if (!idx)
        throw CtlError(fmt::format("unknown interface '{}' (in this network namespace)", name));
    return idx;
}

std::string ifname_of(uint32_t ifindex)
{
    char buf[IF_NAMESIZE] = {};
    if (!if_indextoname(ifindex, buf))
        return fmt::format("ifindex {}", ifindex);
    return buf;
}

topo::Mac mac_of(const std::string &name)
{
    Fd sock(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!sock)
        throw CtlError(errno_msg("socket", errno));
    struct ifreq ifr {};
    std::strncpy(ifr.ifr_name, name.c_str(), IF_NAMESIZE - 1);
    if (::ioctl(sock.get(), SIOCGIFHWADDR, &ifr) != 0)
        throw CtlError(errno_msg(fmt::format("cannot read the MAC address of {}", name), errno));
    topo::Mac mac;
    std::memcpy(mac.data(), ifr.ifr_hwaddr.sa_data, mac.size());
    return mac;
}

uint32_t be_ip(const std::string &text, const std::string &what) {
    if (auto a = util::parse_ipv4_be(text))
        return *a;
    throw CtlError(fmt::format("{}: '{}' is not an IPv4 address", what, text));
}

} // namespace incxdp::ctl
