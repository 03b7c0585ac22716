// SPDX-License-Identifier: BSD-2-Clause
// The incxdp control plane as a library: what `incxdp load|unload|status|
// job|stats` do, callable from tests. Every function throws CtlError with
// a message naming the object and the reason.
#pragma once

#include <incxdp/maps.h>
#include <incxdp/topology.h>

#include <array>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <optional>
#include <string>
#include <vector>

namespace incxdp::ctl {

struct CtlError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Where the maps are pinned. INCXDP_PIN_DIR unless the environment variable
// INCXDP_PIN_DIR says otherwise (tests use private directories).
std::string default_pin_dir();

// ---- load / unload / status -------------------------------------------------

enum class AttachMode { Native, Skb };

struct LoadOptions {
    std::vector<std::string> ifaces;
    AttachMode mode = AttachMode::Native;
    uint32_t slots = 0;          // slot map entries; 0 = default or the pinned map's
    uint16_t native_port = 0xBEF0;
    std::string pin_dir = default_pin_dir();
};

// Attaches the engine to every interface (all or nothing) and pins its maps.
void load(const LoadOptions &opts);
// Detaches from the given interfaces (all loaded ones if empty); removes the
// pins once no interface is left.
void unload(const std::vector<std::string> &ifaces, const std::string &pin_dir);

struct PortStatus {
    std::string iface; // empty if the ifindex is unknown in this namespace
    uint32_t ifindex = 0;
    std::string mode;  // "native", "skb", "dispatcher/native", ... or "detached"
    uint32_t prog_id = 0;
    // Whether the interface transmits frames XDP redirects to it (the
    // kernel's NETDEV_XDP_ACT_NDO_XMIT; a veth only while its peer runs
    // native XDP). A native engine's forwarding and multicast out of a port
    // without it are dropped. Unknown before Linux 6.3 or in another netns.
    std::optional<bool> xdp_xmit;
};

struct Status {
    bool loaded = false;
    std::string pin_dir;
    std::string netns;        // where the engine was loaded, "net:[inode]"
    bool other_netns = false; // not this process's: port names unknown here
    std::vector<PortStatus> ports;
    uint32_t slots_total = 0;
    uint32_t slots_used = 0;
    uint32_t jobs = 0;
};

Status status(const std::string &pin_dir);

// ---- jobs: the P4-equivalent rules ---------------------------------------------

struct WorkerSpec {
    uint16_t rank = 0;
    topo::Mac mac{};
    uint32_t ip = 0;       // network byte order
    uint16_t port = 0;     // host byte order
    std::string iface;     // switch port the worker is reached through
};

struct JobSpec {
    uint32_t id = 0;
    std::vector<WorkerSpec> workers; // ranks 0..n-1, each exactly once
    uint32_t switch_ip = 0;          // network byte order
    uint32_t slots = 256;            // pool size
    uint32_t max_elems = INCXDP_MAX_ELEMS;
};

// Job `id` of a topology, seen from its switch.
JobSpec job_from_topology(const topo::Topology &t, uint32_t id);
// Parses "RANK=MAC/IP:PORT@IFACE", e.g. "0=02:00:00:00:00:01/10.0.0.1:4000@p-w0".
WorkerSpec parse_worker_spec(const std::string &s);

struct JobInfo {
    uint32_t id = 0;
    uint32_t kind = INCXDP_JOB_STAR; // enum incxdp_job_kind
    uint32_t parent_qpn = 0;         // ROCE_TREE: 0 at the root
    uint32_t nworkers = 0;           // ROCE_TREE: this switch's children
    uint32_t pool_base = 0;
    uint32_t pool_size = 0;
    uint32_t max_elems = 0;
    std::string switch_addr; // ip
    std::vector<WorkerSpec> workers;
};

// Installs a job (all or nothing). Fails if the id is taken, a worker
// address belongs to another job, a port is not loaded, or the pool does
// not fit in the free slots.
void job_add(const JobSpec &job, const std::string &pin_dir);
void job_del(uint32_t id, const std::string &pin_dir);
// Clears the job's slots. Slot state outlives a run (a late retransmission
// must still find its result), so a job restarted from scratch by its
// workers starts from reset slots, as SwitchML's controller resets its
// registers per job. A roce-tree job's connections also restart their
// receive state (epsn = rx_base), as a new RC connection setup would.
void job_reset(uint32_t id, const std::string &pin_dir);
std::vector<JobInfo> job_list(const std::string &pin_dir);

// ---- stats -------------------------------------------------------------------

const char *stat_name(enum incxdp_stat s);
// Counter name -> sum over CPUs.
std::map<std::string, uint64_t> read_stats(const std::string &pin_dir);
void reset_stats(const std::string &pin_dir);

} // namespace incxdp::ctl
