// SPDX-License-Identifier: BSD-2-Clause
// The fixed world the frame fuzzer runs in: two active jobs with small pools
// separated by guard slots, plus senders that must be refused (another
// port, an inactive job, a rank beyond the job). The engine under test and
// the model are both built from these tables, so they cannot drift apart.
#pragma once

#include "../../common/frames.h"

#include <incxdp/maps.h>

#include <arpa/inet.h>
#include <array>
#include <cstdint>
#include <vector>

namespace incxdp::fuzz {

using test::Bytes;
using test::Endpoint;

// bpf_prog_test_run without a context runs as if received on ifindex 1 (lo).
constexpr uint32_t kTestIfindex = 1;
constexpr uint32_t kOtherIfindex = 99;
constexpr uint16_t kNativePort = INCXDP_UDP_PORT;
constexpr uint16_t kRocePort = 4791;

// incxdp_slots has kSlotEntries entries: guard 0 | job A 1..4 | guard 5 |
// job B 6..7 | guard 8. A frame must never change a guard slot, and a job's
// frames never another job's pool.
constexpr uint32_t kSlotEntries = 9;

struct JobDef {
    uint32_t id;
    uint32_t nworkers;
    uint32_t pool_base;
    uint32_t pool_size;
    uint32_t max_elems;
    uint8_t mac_tag;  // workers' MAC 02:49:58:<tag>:<rank>:00
    uint32_t ip_base; // rank r has ip_base + r
    uint16_t port;    // every worker's UDP source port
};

constexpr std::array<JobDef, 2> kJobs = {{
    {7, 4, 1, 4, INCXDP_MAX_ELEMS, 0x01, 0x0a4d0001u, 4000},
    {200, 2, 6, 2, 64, 0x02, 0x0a4d0101u, 4100},
}};
constexpr uint32_t kInactiveJob = 11;      // registered senders, no job entry
constexpr uint32_t kSwitchIp = 0x0a4d00fe; // 10.77.0.254

inline Endpoint worker_ep(const JobDef &j, uint16_t rank) {
    return Endpoint{{0x02, 0x49, 0x58, j.mac_tag, uint8_t(rank), 0x00}, j.ip_base + rank, j.port};
}

inline Endpoint switch_ep(uint16_t port) {
    return Endpoint{{0x02, 0x49, 0x58, 0x00, 0x00, 0x00}, kSwitchIp, port};
}

// One row of incxdp_workers.
struct SenderDef {
    Endpoint ep;
    uint32_t job;
    uint16_t rank;
    uint32_t ifindex;
};

// Everything registered in incxdp_workers: the jobs' workers, then the
// senders the engine must refuse although they are in the table.
inline std::vector<SenderDef> registered_senders() {
    std::vector<SenderDef> v;
    for (const auto &j : kJobs)
        for (uint16_t r = 0; r < j.nworkers; r++)
            v.push_back({worker_ep(j, r), j.id, r, kTestIfindex});
    // Job A's rank 1 addresses seen on another switch port: a forgery.
    v.push_back({Endpoint{{0x02, 0x49, 0x58, 0x03, 0x00, 0x00}, 0x0a4d0032u, 4000}, kJobs[0].id, 1,
                 kOtherIfindex});
    // A worker of a job that is not (or no longer) installed.
    v.push_back({Endpoint{{0x02, 0x49, 0x58, 0x03, 0x01, 0x00}, 0x0a4d0033u, 4000}, kInactiveJob, 0,
                 kTestIfindex});
    // A rank beyond job A's worker count (the control plane never writes
    // one; the data plane must refuse it anyway).
    v.push_back({Endpoint{{0x02, 0x49, 0x58, 0x03, 0x02, 0x00}, 0x0a4d0034u, 4000}, kJobs[0].id, 5,
                 kTestIfindex});
    return v;
}

inline incxdp_job job_entry(const JobDef &j) {
    incxdp_job e{};
    e.active = 1;
    e.nworkers = j.nworkers;
    e.pool_base = j.pool_base;
    e.pool_size = j.pool_size;
    e.max_elems = j.max_elems;
    e.switch_ip = htonl(kSwitchIp);
    return e;
}

} // namespace incxdp::fuzz
