// SPDX-License-Identifier: BSD-2-Clause
// A test process's own namespace: this process alone, without IPv6, whose
// router solicitations and reports would add frames to counters the tests
// check exactly. Dies with the process.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sched.h>
#include <string>

namespace incxdp::test {

// "" on success, else what failed.
inline std::string enter_private_netns() {
    if (unshare(CLONE_NEWNET) != 0)
        return std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
    for (const char *conf : {"all", "default"})
        if (FILE *f = std::fopen(
                (std::string("/proc/sys/net/ipv6/conf/") + conf + "/disable_ipv6").c_str(), "w")) {
            std::fputs("1", f);
            std::fclose(f);
        }
    return "";
}

} // namespace incxdp::test
