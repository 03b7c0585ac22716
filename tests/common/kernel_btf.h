// SPDX-License-Identifier: BSD-2-Clause
// What the running kernel offers BPF programs, from its BTF: tests that
// check a path only some kernels take ask here which one to expect.
#pragma once

#include <bpf/btf.h>
#include <linux/btf.h>

namespace incxdp::test {

// Whether vmlinux has a function (a kfunc, a helper's implementation) of
// that name. false also when the kernel exposes no BTF.
inline bool kernel_has_func(const char *name) {
    struct btf *vmlinux = btf__load_vmlinux_btf();
    if (!vmlinux)
        return false;
    const bool has = btf__find_by_name_kind(vmlinux, name, BTF_KIND_FUNC) >= 0;
    btf__free(vmlinux);
    return has;
}

} // namespace incxdp::test
