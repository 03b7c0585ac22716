// SPDX-License-Identifier: BSD-2-Clause
// incxdp's own tc filters (clsact, direct action): the fault injector's
// (chaos_ctl.cpp) and ixchaos_bounce (chaos_xdp.cpp). A filter is known by
// its hook, handle and priority and by the name of the program it runs, so
// one that someone else put at the same place is never taken for ours.
#pragma once

#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdint>
#include <string>

namespace incxdp::ctl {

// While it lives, libbpf's warnings go out at debug level (`-v`): for
// probes whose "not there" answers are expected (tc: no qdisc yet, no
// filter, clsact already present; libxdp: a dispatcher the kernel refuses).
class DemoteLibbpfWarnings {
  public:
    DemoteLibbpfWarnings() { previous_ = libbpf_set_print(&demote); }
    ~DemoteLibbpfWarnings() { libbpf_set_print(previous_); }
    DemoteLibbpfWarnings(const DemoteLibbpfWarnings &) = delete;
    DemoteLibbpfWarnings &operator=(const DemoteLibbpfWarnings &) = delete;

  private:
    static int demote(enum libbpf_print_level, const char *fmt, va_list args) {
        return previous_ ? previous_(LIBBPF_DEBUG, fmt, args) : 0;
    }
    static inline libbpf_print_fn_t previous_ = nullptr;
};

struct TcFilter {
    uint32_t ifindex = 0;
    bpf_tc_attach_point point = BPF_TC_INGRESS;
    uint32_t handle = 0;
    uint32_t priority = 0;
    const char *prog_name = ""; // as the kernel keeps it (15 characters)
};

// The id of the program our filter runs, 0 if none is there or the filter
// at that place runs another program.
uint32_t tc_filter_prog(const TcFilter &f);

// Attaches prog_fd as the filter, replacing ours, and creates the clsact
// qdisc if the interface has none (it is shared with others: never removed
// here). Errors name `iface` and `what` ("the chaos program to veY egress").
void tc_filter_attach(const TcFilter &f, int prog_fd, const std::string &iface,
                      const std::string &what);

// Detaches the filter; 0, or a negative errno (one already gone is 0).
int tc_filter_detach(const TcFilter &f);

} // namespace incxdp::ctl
