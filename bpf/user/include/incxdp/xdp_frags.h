// SPDX-License-Identifier: BSD-2-Clause
// Whether an XDP program is loaded as xdp.frags, decided at load time.
//
// A frags program attaches in driver mode on links of any MTU (on veth a
// plain one is refused above 3506), and there veth keeps every frame of up
// to one buffer (3520 B) linear: all the frames incxdp sends. Drivers with
// smaller receive buffers split even those; the programs pull them whole
// (frame_pull_linear in bpf/lib/parse.h, Linux 6.18). In
// generic (skb) mode it does not: a frags program is handed an skb's
// fragments as they are (every UDP-GSO segment arrives in fragments), while
// a plain one gets every frame linearised, at any MTU. The engine reads
// frames as one buffer, so its programs are frags in driver mode only.
#pragma once

#include <bpf/libbpf.h>
#include <linux/bpf.h>

#include <initializer_list>

namespace incxdp {

/// Sets or clears BPF_F_XDP_HAS_FRAGS on each program (opened, not loaded:
/// the sections are plain "xdp" / "xdp/devmap"). Returns 0 or a negative
/// errno from libbpf.
inline int set_xdp_frags(std::initializer_list<bpf_program *> progs, bool frags)
{
    for (bpf_program *p : progs) {
        __u32 flags = bpf_program__flags(p);
        flags = frags ? flags | BPF_F_XDP_HAS_FRAGS : flags & ~__u32(BPF_F_XDP_HAS_FRAGS);
        if (int err = bpf_program__set_flags(p, flags))
            return err;
    }
    return 0;
}

} // namespace incxdp
