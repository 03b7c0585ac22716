// SPDX-License-Identifier: BSD-2-Clause
// A property check for fuzz harnesses: on failure print what and where, and
// abort, which libFuzzer reports as a crash with the input saved (and the
// replay test fails on).
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            std::fprintf(stderr, "%s:%d: property violated: %s\n", __FILE__, __LINE__, #cond);     \
            std::abort();                                                                          \
        }                                                                                          \
    } while (0)
