// SPDX-License-Identifier: BSD-2-Clause
// A rank's roce CommConfig for the in-process engine tests: the connection
// (QPNs, PSN bases, addresses) of the soft switch model's rank r and the
// engine's knobs (window, timers, limits).
#pragma once

#include "roce_soft_switch.h"

#include <incxdp/communicator.h>

#include <arpa/inet.h>

#include <atomic>
#include <chrono>
#include <string>

namespace incxdp::test {

inline constexpr uint32_t kRoceTestJob = 9;

struct RoceOptions {
    SoftSwitchConfig sw;
    uint32_t window = 32;
    uint32_t elems = 0;
    std::chrono::milliseconds timeout{100}, max_timeout{400};
    std::chrono::milliseconds deadline{30000};
    uint32_t max_retries = 0;
    const std::atomic<bool> *stop = nullptr;
    /// The start handshake and check before the first call (off: the cases
    /// count frames and PSNs from idx 0 of the bases).
    bool start_handshake = false;
};

inline std::string ip_of(uint32_t net_order) {
    uint32_t h = ntohl(net_order);
    return std::to_string(h >> 24) + "." + std::to_string((h >> 16) & 255) + "." +
           std::to_string((h >> 8) & 255) + "." + std::to_string(h & 255);
}

inline CommConfig roce_config(const SoftConn &k, const RoceOptions &o, uint32_t r) {
    CommConfig c;
    c.protocol = Protocol::Roce;
    c.carrier = Carrier::AfXdp;
    c.rank = r;
    c.world_size = o.sw.ranks;
    c.job = kRoceTestJob;
    c.local_ip = ip_of(k.host_ip);
    c.switch_ip = ip_of(k.switch_ip);
    c.local_port = INCXDP_ROCE_UDP_PORT;
    c.roce.local_qpn = k.host_qpn;
    c.roce.remote_qpn = k.switch_qpn;
    c.roce.up_base = k.up_base;
    c.roce.down_base = k.down_base;
    c.roce.sport = k.host_sport;
    c.roce.pool = o.sw.pool;
    c.roce.any_order = o.sw.any_order;
    c.roce.start_handshake = o.start_handshake;
    c.roce.local_mac = k.host_mac;
    c.roce.switch_mac = k.switch_mac;
    c.window = o.window;
    c.elems_per_packet = o.elems;
    c.timeout = o.timeout;
    c.max_timeout = o.max_timeout;
    c.deadline = o.deadline;
    c.max_retries = o.max_retries;
    c.stop = o.stop;
    return c;
}

} // namespace incxdp::test
