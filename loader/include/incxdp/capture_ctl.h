// SPDX-License-Identifier: BSD-2-Clause
// `incxdp capture`: every frame arriving at incxdp's XDP programs on the
// given interfaces, written as a pcap file (bpf/lib/capture.h says why not
// tcpdump or xdpdump). Works on any interface running incxdp_ingress,
// incxdp_xsk or incxdp_pass, attached alone or through libxdp's dispatcher.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

namespace incxdp::ctl {

struct CaptureOptions {
    std::vector<std::string> ifaces; ///< empty = every interface of this netns running one of ours
    std::string file;                ///< pcap output (linktype Ethernet)
    uint64_t count = 0;              ///< stop after this many frames; 0 = no limit
    double seconds = 0;              ///< stop after this long; 0 = no limit
};

struct CaptureResult {
    uint64_t frames = 0; ///< written to the file
    uint64_t lost = 0;   ///< dropped by the kernel: the perf buffer was full
    std::vector<std::string> ifaces;
};

/// Captures until count/seconds or until *stop becomes true (a signal
/// handler may set it). Throws CtlError naming the interface when it runs
/// no program of ours, or when the file cannot be written.
CaptureResult capture(const CaptureOptions &opts, const std::atomic<bool> &stop);

} // namespace incxdp::ctl
