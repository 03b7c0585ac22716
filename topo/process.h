// SPDX-License-Identifier: BSD-2-Clause
// Running ip(8) and code inside a namespace, for netns.cpp. fork/exec with
// an argv vector (no shell, so names are never re-parsed), stdout and
// stderr captured so failures can quote ip's own reason.
// Internal to incxdp_topo (the tests use it too).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace incxdp::topo::detail {

struct ProcResult {
    int status = -1; // exit code, or 128 + signal number
    std::string out, err;
};

// Runs argv[0] (looked up in PATH, then /usr/sbin and /sbin, which sudo
// and cron environments may leave out) and waits for it.
ProcResult run(const std::vector<std::string> &argv);

// Like run() but throws NetnsError "<what>: `cmd` failed: <ip's stderr>"
// unless the command exits 0. Returns its stdout.
std::string run_ok(const std::vector<std::string> &argv, const std::string &what);

// Runs fn in a forked child that has joined the network namespace
// /var/run/netns/<netns>. Netlink sockets, /proc/sys/net and BPF links are
// bound to the namespace of the thread that creates them, so this is how
// per-namespace work is done without disturbing the caller's namespace.
// An exception from fn becomes a NetnsError "<what>: <its message>".
void in_netns(const std::string &netns, const std::function<void()> &fn, const std::string &what);

std::string join_argv(const std::vector<std::string> &argv);

} // namespace incxdp::topo::detail
