// SPDX-License-Identifier: BSD-2-Clause
#include "xdp_attach.h"
#include "pinned_maps.h"
#include "port_util.h"
#include "tc_filter.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace incxdp::ctl {

MultiprogPtr multiprog_of(uint32_t ifindex) {
    xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(static_cast<int>(ifindex));
    if (libxdp_get_error(mp) || !mp)
        return nullptr;
    return MultiprogPtr(mp);
}

ProgMatch prog_named(const char *name) {
    return
        [name](const xdp_program *p) { return p && std::strcmp(xdp_program__name(p), name) == 0; };
}

const xdp_program *find_prog(const xdp_multiprog *mp, const ProgMatch &match) {
    if (xdp_multiprog__is_legacy(mp)) {
        const xdp_program *main = xdp_multiprog__main_prog(mp);
        return main && match(main) ? main : nullptr;
    }
    for (auto *p = xdp_multiprog__next_prog(nullptr, mp); p; p = xdp_multiprog__next_prog(p, mp))
        if (match(p))
            return p;
    return nullptr;
}

std::string mode_name(const xdp_multiprog *mp) {
    std::string m;
    switch (xdp_multiprog__attach_mode(mp)) {
    case XDP_MODE_NATIVE:
        m = "native";
        break;
    case XDP_MODE_SKB:
        m = "skb";
        break;
    case XDP_MODE_HW:
        m = "hw";
        break;
    default:
        m = "unknown";
        break;
    }
    return xdp_multiprog__is_legacy(mp) ? m : "dispatcher/" + m;
}

int attach_prog(xdp_program *prog, uint32_t ifindex, xdp_attach_mode mode) {
    DemoteLibbpfWarnings quiet;
    return xdp_program__attach(prog, static_cast<int>(ifindex), mode, 0);
}

void detach_prog(uint32_t ifindex, const ProgMatch &match, const std::string &what) {
    MultiprogPtr mp = multiprog_of(ifindex);
    if (!mp)
        return; // interface gone or nothing attached
    const xdp_program *ours = find_prog(mp.get(), match);
    if (!ours)
        return;
    int err;
    if (xdp_multiprog__is_legacy(mp.get()))
        err = xdp_multiprog__detach(mp.get());
    else
        err = xdp_program__detach(const_cast<xdp_program *>(ours), static_cast<int>(ifindex),
                                  xdp_multiprog__attach_mode(mp.get()), 0);
    if (err && err != -ENODEV)
        throw CtlError(
            errno_msg(fmt::format("cannot detach {} from {}", what, ifname_of(ifindex)), err));
}

} // namespace incxdp::ctl
