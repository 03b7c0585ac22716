// SPDX-License-Identifier: BSD-2-Clause
// A test process's own namespace: this process alone, without IPv6, whose
// router solicitations and reports would add frames to counters the tests
// check exactly. Dies with the process.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstdlib>
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

// A veth pair a <-> b, both up, in the calling process's namespace: "" on
// success, else what failed.
inline std::string add_veth_pair(const std::string &a, const std::string &b) {
    const std::string cmd = "ip link add " + a + " type veth peer name " + b + " && ip link set " + a +
                            " up && ip link set " + b + " up";
    return std::system(cmd.c_str()) == 0 ? "" : "cannot create the veth pair " + a + "/" + b + " (ip link add)";
}

} // namespace incxdp::test
