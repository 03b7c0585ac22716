// SPDX-License-Identifier: BSD-2-Clause
// A shell command's exit status and output, for the SMI tests that drive
// `incxdp smi`, bpftool and the topology tools by command line.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace incxdp::test {

struct CmdResult {
    int status = -1;
    std::string out;
};

/// Runs `cmd` with sh; stderr joins stdout unless merge_stderr is false.
inline CmdResult run(const std::string &cmd, bool merge_stderr = true) {
    CmdResult r;
    FILE *p = popen((cmd + (merge_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
    if (!p)
        return r;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof(buf), p))
        r.out.append(buf, n);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return r;
}

} // namespace incxdp::test
