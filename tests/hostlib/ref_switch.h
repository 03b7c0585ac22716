// SPDX-License-Identifier: BSD-2-Clause
// A userspace reference of the switch semantics libincxdp programs against
// (docs/PROTOCOLS.md §2 plus the round/chunk checks of §1), on 127.0.0.1, for the
// end-to-end tests only. It parses the contract headers (proto.h,
// switchml.h) itself rather than through hostlib's codec, and can lose,
// duplicate and replay packets deterministically.
#pragma once

#include <incxdp/reduce_op.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

namespace incxdp::test {

struct RefSwitchConfig {
    Wire wire = Wire::Native;
    uint32_t job = 7;
    uint32_t slots = 16;                // pool size; slot index must be below
    std::vector<uint16_t> worker_ports; // 127.0.0.1:port -> rank (index)
    double drop = 0; // probability to lose a datagram (ingress and each result copy)
    double dup = 0;  // probability to send a result copy twice
    double late = 0; // probability to replay a result copy ~64 datagrams later
    uint64_t seed = 1;
};

struct RefSwitchCounters {
    uint64_t rx = 0, lost = 0, unknown_sender = 0, malformed = 0, consumed = 0, completed = 0,
             retx_unicast = 0, retx_drop = 0, stale = 0, mismatch = 0, tx = 0, replayed = 0;
};

/// Runs the switch on its own thread from construction to destruction.
class RefSwitch {
  public:
    explicit RefSwitch(RefSwitchConfig cfg);
    ~RefSwitch();
    RefSwitch(const RefSwitch &) = delete;
    RefSwitch &operator=(const RefSwitch &) = delete;

    uint16_t port() const { return port_; }
    RefSwitchCounters counters() const;

  private:
    struct Set {
        uint32_t bitmap = 0, remaining = 0, round = 0, chunk = 0;
        uint8_t op = 0, size = 0;
        uint16_t nelems = 0;
        int8_t exp0 = 0, exp1 = 0;
        std::vector<int32_t> vals;
        std::vector<uint8_t> result; // last result datagram of this set
    };
    struct Slot {
        Set set[2];
    };

    void loop();
    void on_datagram(const uint8_t *p, size_t len, uint16_t src_port);
    void on_native(const uint8_t *p, size_t len, uint32_t rank);
    void on_switchml(const uint8_t *p, size_t len, uint32_t rank);
    void send_copy(const std::vector<uint8_t> &pkt, uint16_t port);
    void multicast(const std::vector<uint8_t> &pkt);
    bool chance(double p);
    void bump(uint64_t RefSwitchCounters::*field, uint64_t by = 1);

    RefSwitchConfig cfg_;
    int fd_ = -1;
    uint16_t port_ = 0;
    std::vector<Slot> slots_;
    uint64_t draws_ = 0;
    uint64_t received_ = 0;
    struct Late {
        uint64_t due;
        uint16_t port;
        std::vector<uint8_t> pkt;
    };
    std::vector<Late> late_;
    mutable std::mutex mu_; // guards counters_
    RefSwitchCounters counters_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

/// A UDP port on 127.0.0.1 that was free a moment ago.
uint16_t free_udp_port();

} // namespace incxdp::test
