// SPDX-License-Identifier: BSD-2-Clause
#include "tc_filter.h"

#include "pinned_maps.h"

#include <bpf/bpf.h>

#include <cerrno>
#include <cstring>

namespace incxdp::ctl {

namespace {

bpf_tc_hook hook_of(const TcFilter &f) {
    bpf_tc_hook hook{};
    hook.sz = sizeof(hook);
    hook.ifindex = static_cast<int>(f.ifindex);
    hook.attach_point = f.point;
    return hook;
}

bpf_tc_opts opts_of(const TcFilter &f) {
    bpf_tc_opts o{};
    o.sz = sizeof(o);
    o.handle = f.handle;
    o.priority = f.priority;
    return o;
}

} // namespace

uint32_t tc_filter_prog(const TcFilter &f) {
    bpf_tc_hook hook = hook_of(f);
    bpf_tc_opts opts = opts_of(f);
    DemoteLibbpfWarnings quiet;
    if (bpf_tc_query(&hook, &opts) != 0)
        return 0;
    Fd prog(bpf_prog_get_fd_by_id(opts.prog_id));
    if (!prog)
        return 0;
    bpf_prog_info info{};
    __u32 len = sizeof(info);
    if (bpf_obj_get_info_by_fd(prog.get(), &info, &len) != 0)
        return 0;
    return std::strcmp(info.name, f.prog_name) == 0 ? opts.prog_id : 0;
}

void tc_filter_attach(const TcFilter &f, int prog_fd, const std::string &iface,
                      const std::string &what) {
    bpf_tc_hook hook = hook_of(f);
    int err;
    {
        DemoteLibbpfWarnings quiet; // EEXIST: clsact is already there
        err = bpf_tc_hook_create(&hook);
    }
    if (err && err != -EEXIST)
        throw CtlError(errno_msg("cannot create the clsact qdisc on " + iface, err));
    bpf_tc_opts opts = opts_of(f);
    opts.prog_fd = prog_fd;
    opts.flags = BPF_TC_F_REPLACE;
    if ((err = bpf_tc_attach(&hook, &opts)))
        throw CtlError(errno_msg("cannot attach " + what, err));
}

int tc_filter_detach(const TcFilter &f) {
    bpf_tc_hook hook = hook_of(f);
    bpf_tc_opts opts = opts_of(f);
    int err = bpf_tc_detach(&hook, &opts);
    return err == -ENOENT ? 0 : err;
}

} // namespace incxdp::ctl
