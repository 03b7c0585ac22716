// SPDX-License-Identifier: BSD-2-Clause
// Connection-matrix generators (docs/CM.md §3): the plan's dedicated-pod
// INC AllReduce with correct joins, the same flows without INC tokens (host
// aggregation), and htsim's ring AllReduce. Pure: parameters in, a Matrix
// out (cm::to_text() writes it).
#pragma once

#include "cm_parse.h"

#include <cstdint>

namespace incxdp::cm {

struct AllreduceIncParams {
    uint32_t k = 4;          ///< fat-tree radix: k^3/4 hosts, pod 0 aggregates
    uint64_t size = 1 << 20; ///< bytes of every flow (one chunk)
    uint32_t chunks = 1;     ///< chunks per iteration
    uint32_t iterations = 1; ///< rid = 1 .. iterations
    uint32_t fid = 1;        ///< the job's fid, constant
    uint32_t window = 0;     ///< chunks in flight per iteration; 0 = all
    bool inc = true;         ///< false: no semantics tokens (stock htsim grammar)
    AggOp op = AggOp::Sum;
    /// Small runs off a fat-tree: N hosts instead of k^3/4 and A aggregators
    /// (hosts 0..A-1) instead of k^2/4; 0 = the fat-tree's.
    uint32_t hosts = 0, aggregators = 0;
};

/// Per iteration r and chunk c: every host but the chunk's aggregator
/// (host c mod k^2/4) sends an UP flow to it; each UP flow's send_done fires
/// one `barrier count N-1` for (r, c), which starts the aggregator's N-1
/// DOWN flows. Chunk c >= W of an iteration waits for chunk c-W's DOWN
/// flows (a barrier of count N-1); the first W chunks of iteration r+1 wait
/// for the DOWN flows of iteration r's last W chunks (count W(N-1)), which
/// by that chain imply all of iteration r. Throws std::invalid_argument.
Matrix gen_allreduce_inc(const AllreduceIncParams &p);

/// htsim's ring: 2(N-1) steps, node i sends size/N bytes to i+1 per step;
/// node i's step s starts when node i-1's step s-1 is acknowledged (a
/// oneshot fired by its send_done). Flows are listed chain by chain (node
/// j step 0, node j+1 step 1, ...), as htsim's generator lists them.
Matrix gen_allreduce_ring(uint32_t nodes, uint64_t size);

} // namespace incxdp::cm
