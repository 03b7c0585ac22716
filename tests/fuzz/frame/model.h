// SPDX-License-Identifier: BSD-2-Clause
// The oracle: the engine's rules written down again in plain C++ from
// docs/ENGINE.md and docs/PROTOCOLS.md §1-§2, not from the BPF code. For each frame
// it predicts the counter, the verdict, the output frame and the slot array
// after it; the fuzzer compares all four with the engine.
#pragma once

#include "world.h"

#include <incxdp/maps.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace incxdp::fuzz {

// The chaos hook every program runs first (bpf/lib/chaos_xdp.h), with no
// rates set: a REFLECT frame goes straight back as RETURN, a RETURN frame
// goes on as the IPv4 frame it was. `seen` is the frame after the hook.
enum class ChaosHook { None, Reflect, Return };
ChaosHook chaos_hook(const Bytes &f, Bytes &seen);

struct Prediction {
    int stat = INCXDP_STAT_PASS;
    int verdict = 0;          // XDP_*
    Bytes out;                // expected output (PASS: the input; TX/REDIRECT: the result)
    bool check_out = false;   // out is exact for this verdict
    bool pulled = false;      // arrived in fragments that fit the buffer: made linear first
    // For TX/REDIRECT: where the result sits, for reports.
    uint32_t slot_index = 0;
    uint8_t set = 0;
};

// Where an aggregation frame's fields are, once decoded.
struct Decoded {
    bool switchml = false;
    bool result = false; // native RESULT: a parent switch's, down a tree
    size_t hdr_len = 0;
    uint32_t job = 0, round = 0, chunk = 0;
    uint16_t rank = 0, nworkers = 0, slot = 0, nelems = 0;
    uint8_t set = 0, op = 0, dtype = 0;
    int8_t exp0 = 0, exp1 = 0;
};

class Model {
  public:
    // can_pull: the kernel has bpf_xdp_pull_data (the engine then pulls a
    // frame in fragments whole when the buffer has the room).
    explicit Model(bool can_pull);

    // Predicts the engine's handling of `frame` and applies it to the slots.
    Prediction apply(const Bytes &frame);

    const std::vector<incxdp_slot> &slots() const { return slots_; }
    // After a disagreement (--keep-going): continue from the engine's state.
    void resync(const std::vector<incxdp_slot> &s) { slots_ = s; }
    void reset_pool(const JobDef &j);

    // Lookups the traffic generator uses to build meaningful frames.
    const incxdp_slot &slot(uint32_t index) const { return slots_.at(index); }

  private:
    struct Sender {
        uint32_t job;
        uint16_t rank;
        uint32_t ifindex;
    };
    using SenderKey = std::tuple<std::array<uint8_t, 6>, uint32_t, uint16_t>; // mac, ip, port

    std::optional<Decoded> decode(const Bytes &f, bool switchml) const;

    bool can_pull_;
    std::vector<incxdp_slot> slots_;
    std::map<SenderKey, Sender> senders_;
    std::map<uint32_t, incxdp_job> jobs_;
};

} // namespace incxdp::fuzz
