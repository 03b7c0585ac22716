// SPDX-License-Identifier: BSD-2-Clause
// Frame generation for the frame fuzzer: a seeded PRNG, builders of valid
// SwitchML, native and RoCEv2 frames, mutators, and "guided" traffic that
// reads the model's slots to keep every slot moving through idle, in
// progress, complete and shadow-set flips. Same seed, same frames.
#pragma once

#include "model.h"
#include "world.h"

#include <cstdint>
#include <string>
#include <vector>

namespace incxdp::fuzz {

// xoshiro256** seeded by splitmix64: fast, and the same on every compiler
// (std:: distributions are implementation-defined).
class Rng {
  public:
    explicit Rng(uint64_t seed);
    uint64_t next();
    uint32_t below(uint32_t n);                                                  // [0, n), n > 0
    uint32_t range(uint32_t lo, uint32_t hi) { return lo + below(hi - lo + 1); } // [lo, hi]
    bool percent(uint32_t p) { return below(100) < p; }
    uint8_t byte() { return uint8_t(next()); }
    template <class T> const T &pick(const std::vector<T> &v) {
        return v[below(uint32_t(v.size()))];
    }

  private:
    uint64_t s_[4];
};

// What a frame is, for the distribution report.
enum class Kind {
    Random,          // random bytes, random length
    RandomL4,        // valid Eth/IPv4/UDP to an aggregation port, random payload
    Guided,          // a well-formed contribution chosen from the model's slot state
    Roce,            // a valid RoCEv2 RC SEND (no connection installed: refused and counted)
    MutatedGuided,   // mutations of the above
    MutatedSwitchml, // mutations of a random well-formed SwitchML frame
    MutatedNative,   // mutations of a random well-formed native frame
    MutatedRoce,
    Count,
};
const char *kind_name(Kind k);

constexpr size_t kMinFrame = 14;   // bpf_prog_test_run refuses less than an Ethernet header
constexpr size_t kMaxFrame = 3500; // the topologies' MTU; the engine's largest frame is 3402
constexpr size_t kMaxJumboFrame = 9014; // a jumbo link's (MTU 9000): fragments past 3520 B

class Traffic {
  public:
    Traffic(Rng &rng, const Model &model) : rng_(rng), model_(model) {}
    Bytes next(Kind &kind);

    // Builders, public for the unit checks of the driver (--self-test).
    Bytes roce_frame(uint8_t opcode, uint32_t imm, const std::vector<int32_t> &vals);

  private:
    Bytes random_bytes();
    Bytes random_l4();
    Bytes guided();
    Bytes random_switchml();
    Bytes random_native();
    Bytes random_roce();
    void mutate(Bytes &f);

    std::vector<int32_t> values(size_t n);
    Endpoint random_sender();

    Rng &rng_;
    const Model &model_;
    uint32_t next_round_ = 1;
};

} // namespace incxdp::fuzz
