// SPDX-License-Identifier: BSD-2-Clause
#include "incxdp/util/iface.h"

#include "incxdp/util/fd.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace incxdp::util {
namespace {

// The ioctl `req` on `ifname`; false with errno set on failure.
bool iface_ioctl(const std::string &ifname, unsigned long req, ifreq &r) {
    Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd)
        return false;
    std::snprintf(r.ifr_name, IFNAMSIZ, "%s", ifname.c_str());
    return ::ioctl(fd.get(), req, &r) == 0;
}

} // namespace

std::optional<Mac> iface_mac(const std::string &ifname) {
    ifreq r{};
    if (!iface_ioctl(ifname, SIOCGIFHWADDR, r))
        return std::nullopt;
    Mac m;
    std::memcpy(m.data(), r.ifr_hwaddr.sa_data, m.size());
    return m;
}

std::optional<uint32_t> iface_mtu(const std::string &ifname) {
    ifreq r{};
    if (!iface_ioctl(ifname, SIOCGIFMTU, r))
        return std::nullopt;
    return static_cast<uint32_t>(r.ifr_mtu);
}

} // namespace incxdp::util
