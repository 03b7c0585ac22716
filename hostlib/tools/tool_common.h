// SPDX-License-Identifier: BSD-2-Clause
// What incxdp-worker and incxdp-bench share: the bootstrap flags, size
// parsing, deterministic test data and the verification of a result.
#pragma once

#include <incxdp/communicator.h>
#include <incxdp/util/size.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace incxdp::tools {

/// util::parse_size() of whole elements: the result must be a multiple of 4.
uint64_t parse_size(std::string_view s);
/// Comma-separated list of parse_size() values.
std::vector<uint64_t> parse_size_list(std::string_view s);
using util::algbw_mbps;
using util::format_size;

/// Flags every tool takes to find its place in a job.
struct BootstrapOptions {
    std::string topo;
    uint32_t job = 1;
    uint32_t rank = 0;
    std::string dtype = "int32";
    std::string op = "sum";
    std::string wire = "native";
    std::string carrier;   // auto|socket|af_xdp|verbs; empty: auto (the job gives the protocol)
    std::string transport; // the older spelling of carrier: auto|udp|afxdp|af_xdp|roce|verbs
    std::string verbs_device;   // verbs: device name; empty = the one holding the rank's IP
    std::string publish_qpn;    // verbs: shell command run with the QP's number, see below
    uint8_t verbs_ack_timeout = VerbsOptions{}.ack_timeout;
    uint32_t batch = 0;    // 0 = library default
    bool no_gso = false, udp_gro = false;
    std::string xdp_tx = "live"; // afxdp: live | ring
    uint32_t xdp_queue = 0;
    bool xdp_no_follow_queues = false;
    uint32_t window = 0;         // 0 = from the topology (min(128, job slots))
    uint32_t elems = 0;          // 0 = wire default
    uint32_t switch_port = 0;    // 0 = wire default
    uint32_t timeout_ms = 0;     // 0 = the library's (20 ms; roce-tree jobs 2 ms)
    double deadline_s = 30;
    uint64_t seed = 1;
    bool json = false;
};

void add_bootstrap_options(CLI::App &app, BootstrapOptions &o);
/// The command of --publish-qpn with {qpn}, {rank} and {job} replaced.
std::string expand_publish_qpn(const std::string &cmd, uint32_t qpn, uint32_t rank, uint32_t job);

/// CommConfig::from_topology() plus the overrides given on the command line.
/// Throws std::invalid_argument for a carrier the job's protocol cannot use
/// (CommConfig::use_carrier: verbs on a star job, socket on a roce-tree job).
CommConfig make_config(const BootstrapOptions &o);

/// SIGINT, SIGTERM and SIGHUP stop the running collective instead of the
/// process (CommConfig::stop), so that the communicator's destructor puts
/// the interface's XDP program back; a second signal kills as usual.
/// Returns the flag to put in CommConfig::stop.
const std::atomic<bool> *stop_on_signals();
/// The signal that set the flag, 0 if none: exit with 128 + it.
int stop_signal();

/// Which collective a tool runs.
enum class Prim { AllReduce, Reduce, Broadcast, Barrier, AllGather, ReduceScatter };
Prim parse_prim(std::string_view s); ///< throws std::invalid_argument
const char *to_string(Prim p);

struct CollectiveOptions {
    std::string prim = "allreduce";
    uint32_t root = 0; ///< reduce/broadcast
};
void add_collective_options(CLI::App &app, CollectiveOptions &o);

/// Run one collective: allreduce send -> recv; reduce send -> recv (root);
/// broadcast recv in place (send unused); barrier (no data); allgather
/// send (count) -> recv (world_size * count); reduce-scatter send
/// (world_size * count) -> recv (count).
void run_collective(Communicator &comm, Prim prim, uint32_t root, const void *send, void *recv,
                    size_t count, DType dtype, ReduceOp op);

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
/// got[i] is element first + i of the reduction (reduce-scatter: a rank's
/// block); blocks start at multiples of per_packet of the whole buffer.
/// Avg: float32 only, the sum divided by world. `total`: elements of the
/// whole buffer (0 = first + got.size()); a packet's exponent covers all of
/// its elements, also those past the end of a rank's block.
VerifyResult verify_int32(std::span<const int32_t> got, uint64_t seed, uint32_t world, ReduceOp op,
                          uint64_t first = 0);
VerifyResult verify_float32(std::span<const float> got, uint64_t seed, uint32_t world, ReduceOp op,
                            uint32_t per_packet, uint64_t first = 0, uint64_t total = 0);

/// Broadcast: every element's bits equal those of rank `root`'s data.
VerifyResult verify_broadcast(std::span<const int32_t> got_bits, uint64_t seed, uint32_t root,
                              DType dtype);
/// Allgather: block r of got_bits (count elements each) has rank r's bits.
VerifyResult verify_allgather(std::span<const int32_t> got_bits, uint64_t seed, uint32_t world,
                              DType dtype);
/// Reduce on a non-root rank: recv still holds `marker` everywhere.
VerifyResult verify_untouched(std::span<const int32_t> got_bits, int32_t marker);

} // namespace incxdp::tools
