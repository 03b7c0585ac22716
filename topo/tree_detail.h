// SPDX-License-Identifier: BSD-2-Clause
// The part of tree.cpp the parser uses to reject a bad roce-tree job with
// the file position of the job. Internal to incxdp_topo.
#pragma once

#include "incxdp/tree.h"

#include <cstddef>
#include <stdexcept>

namespace incxdp::topo::detail {

// subtree_ranks is a 64-bit mask: one bit per rank of the job.
constexpr size_t kMaxTreeRanks = 64;

// What is wrong with a job's tree, without the "topology T: job N" prefix
// plan_tree() adds (the parser adds "file:line:col: jobs[i] (id N)").
struct TreeProblem : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// plan_tree() for a job known to exist and be a roce-tree job; throws
// TreeProblem.
TreePlan build_tree(const Topology &t, uint32_t job_id);

} // namespace incxdp::topo::detail
