// SPDX-License-Identifier: BSD-2-Clause
// Shared CLI plumbing. libbpf and libxdp talk a lot on stderr (libxdp's dispatcher fallback is
// not an error). Warnings go through; debug and info only with -v.
#include "commands.h"

#include <bpf/libbpf.h>
#include <xdp/libxdp.h>

#include <cstdarg>
#include <cstdio>

namespace incxdp::cli {

static bool g_verbose = false;

static int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
    if (level == LIBBPF_DEBUG && !g_verbose)
        return 0;
    if (level == LIBBPF_INFO && !g_verbose)
        return 0;
    return std::vfprintf(stderr, fmt, args);
}

static int libxdp_print(enum libxdp_print_level level, const char *fmt, va_list args)
{
    // libxdp warns about the dispatcher fallback, which is expected on
    // kernels that refuse freplace; `incxdp status` shows the attach mode,
    // and our own errors carry the errno of whatever failed.
    (void)level;
    if (!g_verbose)
        return 0;
    return std::vfprintf(stderr, fmt, args);
}

void set_library_verbosity(bool verbose)
{
    g_verbose = verbose;
    libbpf_set_print(libbpf_print);
    libxdp_set_print(libxdp_print);
}

void add_common_flags(CLI::App *cmd, CommonFlags &flags)
{
    cmd->add_flag("-j,--json", flags.json, "print JSON");
    cmd->add_flag("-v,--verbose", flags.verbose, "show libbpf/libxdp debug output");
}

} // namespace incxdp::cli
