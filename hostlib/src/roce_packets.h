// SPDX-License-Identifier: BSD-2-Clause
// One collective on a RoCE tree as the packets it sends and the results it
// takes, apart from how they travel: hostlib's own frames over AF_XDP
// (roce_engine.h) or an RC QP of an RDMA device (verbs_session.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace incxdp {
struct CommStats;
}

namespace incxdp::detail {

/// One collective as a sequence of packets k = 0 .. count() - 1, sent at
/// consecutive indices of the job's sequence.
class RocePackets {
  public:
    virtual ~RocePackets() = default;
    virtual uint64_t count() const = 0;
    /// Whether packet k can be built now (float32 data waits for the result
    /// that agreed on its exponent). Asked for packets in order; once true
    /// for k it stays true.
    virtual bool ready(uint64_t k) const {
        (void)k;
        return true;
    }
    /// Fill `payload` (room for elems_per_packet big-endian int32) for packet
    /// k; return the elements written (a multiple of 16, or 0) and set imm.
    virtual uint32_t build(uint64_t k, std::span<std::byte> payload, uint32_t &imm) = 0;
    /// Elements the result of packet k carries (0: a completion).
    virtual uint32_t result_elems(uint64_t k) const = 0;
    /// Take the result of packet k (size-checked, in any order).
    virtual void consume(uint64_t k, std::span<const std::byte> payload) = 0;
};

/// How a rank's collectives reach its leaf switch: hostlib's own RoCEv2
/// frames over AF_XDP (RoceEngine) or an RDMA device's RC QP (verbs_link.h).
class RoceLink {
  public:
    virtual ~RoceLink() = default;
    /// Send every packet of `call` at the connection's next indices and take
    /// all results, adding to `stats`. Throws CommTimeout naming rank, job
    /// and idx when the switch makes no progress.
    virtual void run(RocePackets &call, const char *what, CommStats &stats) = 0;
};

} // namespace incxdp::detail
