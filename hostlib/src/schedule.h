// SPDX-License-Identifier: BSD-2-Clause
// Which packet goes where: the step -> (lane, slot use, set, chunk) mapping
// of one collective call (docs/HOSTLIB.md §3).
//
// A call is a sequence of steps. Float32 calls start with `lanes` warm-up
// steps (exponent only), then one step per chunk; int32 calls are just the
// chunks. Step j runs on lane j % lanes; the lane's packets form a chain:
// step j + lanes is sent when the result of step j arrived. Each step is a
// use of the lane's slot, and a slot flips its shadow set on every use, so
// step j uses set base ^ ((j / lanes) & 1) where base is the slot's next
// set when the call starts (kept across calls by the Communicator).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace incxdp::detail {

struct Schedule {
    size_t count = 0;        ///< elements of the call
    uint32_t per_packet = 1; ///< elements per data packet
    uint64_t chunks = 0;     ///< ceil(count / per_packet)
    uint32_t lanes = 0;      ///< slots used: min(window, chunks) (or as given)
    uint64_t warmup = 0;     ///< leading exponent-only steps: 0 or lanes
    uint64_t steps = 0;      ///< warmup + chunks

    /// A data call: `count` elements cut into chunks, `window` slots at most.
    static Schedule make(size_t count, uint32_t per_packet, uint32_t window, bool float_warmup) {
        Schedule s;
        s.count = count;
        s.per_packet = per_packet;
        s.chunks = (count + per_packet - 1) / per_packet;
        s.lanes = uint32_t(std::min<uint64_t>(window, s.chunks));
        s.warmup = float_warmup ? s.lanes : 0;
        s.steps = s.warmup + s.chunks;
        return s;
    }

    /// A call of exactly one payload-free step per lane (parking).
    static Schedule single_steps(uint32_t lanes) {
        Schedule s;
        s.lanes = lanes;
        s.steps = lanes;
        return s;
    }

    uint32_t lane_of(uint64_t step) const { return uint32_t(step % lanes); }
    /// How many earlier steps of this call used the same lane.
    uint64_t use_of(uint64_t step) const { return step / lanes; }
    uint8_t set_of(uint64_t step, uint8_t base_set) const {
        return uint8_t((base_set ^ use_of(step)) & 1);
    }
    /// Steps the call runs on `lane`; the slot's base set flips this often.
    uint64_t uses_of_lane(uint32_t lane) const {
        return steps / lanes + (lane < steps % lanes ? 1 : 0);
    }
    /// The data chunk a step carries, or nullopt for a warm-up step.
    std::optional<uint64_t> chunk_of(uint64_t step) const {
        if (step < warmup || step >= steps)
            return std::nullopt;
        return step - warmup;
    }
    /// First element of a chunk and how many real elements it holds.
    size_t chunk_begin(uint64_t chunk) const { return size_t(chunk) * per_packet; }
    uint32_t chunk_elems(uint64_t chunk) const {
        return uint32_t(std::min<size_t>(per_packet, count - chunk_begin(chunk)));
    }
    /// The chunk whose exponent a step announces (float32): the next chunk
    /// on the same lane, i.e. step + lanes. nullopt if there is none.
    std::optional<uint64_t> announced_chunk(uint64_t step) const { return chunk_of(step + lanes); }
};

/// Round n up to a multiple of q.
inline uint32_t round_up(uint32_t n, uint32_t q) {
    return (n + q - 1) / q * q;
}

} // namespace incxdp::detail
