// SPDX-License-Identifier: BSD-2-Clause
// Reaching the maps of the XDP program(s) running on an interface, from
// user space, without pins: `incxdp capture` and `incxdp chaos --xdp` find
// their maps this way, and hostlib's AF_XDP transport adopts the chaos and capture
// maps of the program it replaces. Works with libxdp's dispatcher (each
// component) and with a program attached alone.
#pragma once

#include <cstdint>
#include <vector>

namespace incxdp::xdpmaps {

// Ids of the XDP programs that run on `ifindex` in the calling thread's
// network namespace: the components of libxdp's dispatcher, or the one
// program attached (native, skb or offload). Empty if none.
std::vector<uint32_t> prog_ids(int ifindex);

// A new fd of the map called `name` that program `prog_id` uses, or -1.
// With `type` >= 0 the map must also be of that BPF_MAP_TYPE_*. The caller
// closes the fd.
int map_fd(uint32_t prog_id, const char *name, int type = -1);

// The first map called `name` among the programs on `ifindex`; -1 if none.
// `prog_id`, if given, receives the program it belongs to.
int map_fd_on_iface(int ifindex, const char *name, int type = -1, uint32_t *prog_id = nullptr);

} // namespace incxdp::xdpmaps
