// SPDX-License-Identifier: BSD-2-Clause
// What incxdp-worker and incxdp-bench share: the bootstrap flags, size
// parsing, deterministic test data and the verification of a result.
#pragma once

#include <incxdp/communicator.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace incxdp::tools {

/// "4096", "4K", "64M", "1G", "64MiB", "16kB": binary multiples. Throws
/// std::invalid_argument naming the text. The result must be a multiple of 4.
uint64_t parse_size(std::string_view s);
/// Comma-separated list of parse_size() values.
std::vector<uint64_t> parse_size_list(std::string_view s);
/// 4096 -> "4 KiB", 67108864 -> "64 MiB", 1000 -> "1000 B".
std::string format_size(uint64_t bytes);

/// Flags every tool takes to find its place in a job.
struct BootstrapOptions {
    std::string topo;
    uint32_t job = 1;
    uint32_t rank = 0;
    std::string dtype = "int32";
    std::string op = "sum";
    std::string wire = "native";
    std::string transport = "udp";
    uint32_t batch = 0; // 0 = library default
    bool no_gso = false, udp_gro = false;
    std::string xdp_tx = "live"; // afxdp: live | ring
    uint32_t window = 0;         // 0 = from the topology (min(128, job slots))
    uint32_t elems = 0;          // 0 = wire default
    uint32_t switch_port = 0;    // 0 = wire default
    uint32_t timeout_ms = 20;
    double deadline_s = 30;
    uint64_t seed = 1;
    bool json = false;
};

void add_bootstrap_options(CLI::App &app, BootstrapOptions &o);
/// CommConfig::from_topology() plus the overrides given on the command line.
CommConfig make_config(const BootstrapOptions &o);

/// Deterministic data: element `index` of rank `rank` for seed `seed`.
/// int32 covers the full range (sums wrap); float32 is uniform in (-1, 1)
/// times 2^s, s in [-8, 8] varying per 1024 elements (same for all ranks),
/// so blocks have different exponents.
int32_t gen_int32(uint64_t seed, uint32_t rank, uint64_t index);
float gen_float32(uint64_t seed, uint32_t rank, uint64_t index);
void fill(std::span<int32_t> v, uint64_t seed, uint32_t rank);
void fill(std::span<float> v, uint64_t seed, uint32_t rank);

struct VerifyResult {
    bool ok = true;
    uint64_t mismatches = 0;
    uint64_t first_bad = 0;              ///< index of the first mismatch
    double got = 0, want = 0, bound = 0; ///< at first_bad
    double max_err = 0;                  ///< float32: largest |got - want|
    double max_err_over_bound = 0;       ///< float32: largest |got - want| / bound
    std::string describe() const;
};

/// Recompute every rank's data and compare: int32 exactly (wrapping sum),
/// float32 within quant::result_bound() of the exact result in double, using
/// the block exponents the protocol agrees on (blocks of per_packet elements).
VerifyResult verify_int32(std::span<const int32_t> got, uint64_t seed, uint32_t world, ReduceOp op);
VerifyResult verify_float32(std::span<const float> got, uint64_t seed, uint32_t world, ReduceOp op,
                            uint32_t per_packet);

/// algbw in MB/s (10^6 bytes) for `bytes` in `seconds`.
double algbw_mbps(uint64_t bytes, double seconds);

} // namespace incxdp::tools
