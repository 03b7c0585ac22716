// SPDX-License-Identifier: BSD-2-Clause
// CommConfig::stop, checked once per turn of the engines' receive loops:
// the check inline (a relaxed load), the throw out of line.
#pragma once

#include <incxdp/communicator.h>

namespace incxdp::detail {

/// Throws CommInterrupted "<what>: rank R job J interrupted".
[[noreturn]] void throw_interrupted(const CommConfig &cfg, const char *what);

inline void throw_if_stopped(const CommConfig &cfg, const char *what) {
    if (cfg.stop && cfg.stop->load(std::memory_order_relaxed)) [[unlikely]]
        throw_interrupted(cfg, what);
}

} // namespace incxdp::detail
