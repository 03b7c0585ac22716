// SPDX-License-Identifier: BSD-2-Clause
// What a replayed flow carries (docs/CM.md §5): a plain flow a deterministic
// byte pattern of (flow id, offset); an INC flow int32 elements. An UP flow
// carries its sender's vector for (fid, rid, cid); a DOWN flow the aggregate
// its sender computed from its own vector and the UP flows it received.
// Both ends derive the expected bytes from the matrix alone.
#pragma once

#include "cm_parse.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace incxdp::cm {

/// Bytes [offset, offset + len) of plain flow `flow_id`.
void pattern_bytes(uint32_t flow_id, uint64_t offset, uint8_t *out, size_t len);

/// Element i of host `host`'s vector for the key (fid, rid, cid): in
/// [-1000, 1000], so a SUM over 2^21 hosts cannot overflow int32.
int32_t inc_value(uint32_t host, const Semantics &key, uint64_t i);

/// Bytes [offset, offset + len) of host `host`'s vector of `size` bytes:
/// size/4 little-endian int32 elements, then size%4 zero bytes.
void inc_bytes(uint32_t host, const Semantics &key, uint64_t size, uint64_t offset, uint8_t *out,
               size_t len);

/// One aggregator's reduction of one (fid, rid, cid): starts from its own
/// vector and folds in what each UP flow delivered, element by element.
class Aggregate {
  public:
    Aggregate(uint32_t own_host, const Semantics &key, uint64_t size);
    /// Folds element i of one contribution.
    void add(uint64_t i, int32_t v);
    /// Folds a whole host vector (the expected value, from the matrix).
    void add_host(uint32_t host);
    /// One contribution has been folded completely.
    void contribution_done() { ++contributions_; }
    uint32_t contributions() const { return contributions_; }
    /// The result as the DOWN flows carry it (AVG: truncated mean).
    std::string bytes() const;

  private:
    AggOp op_;
    Semantics key_;
    uint64_t size_;
    std::vector<int64_t> acc_;
    uint32_t contributions_ = 1; // the aggregator's own vector
};

} // namespace incxdp::cm
