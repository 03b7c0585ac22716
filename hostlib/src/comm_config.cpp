// SPDX-License-Identifier: BSD-2-Clause
// CommConfig: defaults, validation and the topology bootstrap.
#include <incxdp/communicator.h>
#include <incxdp/proto.h>
#include <incxdp/switchml.h>
#include <incxdp/topology.h>

#include "packet.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace incxdp {
namespace {

// 128 in flight per worker: the best measured on the star topology
// (docs/PERF.md); 256 overflows veth's 256-frame rx rings in bursts.
constexpr uint32_t kDefaultWindow = 128;
constexpr uint32_t kIpUdpLen = 20 + 8;
constexpr uint32_t kMaxWindow = INCXDP_SLOT_INDEX_MASK + 1; // 14-bit slot index
constexpr uint32_t kMaxBatch = 1024;                        // UIO_MAXIOV

uint32_t max_elems_for_mtu(Wire w, uint32_t mtu) {
    uint32_t hdr = uint32_t(detail::header_len(w));
    if (mtu <= kIpUdpLen + hdr)
        return 0;
    return (mtu - kIpUdpLen - hdr) / 4;
}

} // namespace

TransportKind parse_transport(const std::string &s) {
    if (s == "udp")
        return TransportKind::Udp;
    if (s == "afxdp" || s == "af_xdp" || s == "xdp")
        return TransportKind::AfXdp;
    throw std::invalid_argument(fmt::format("transport '{}': expected udp or afxdp", s));
}

const char *to_string(TransportKind t) {
    return t == TransportKind::AfXdp ? "afxdp" : "udp";
}

uint16_t CommConfig::effective_switch_port() const {
    if (switch_port != 0)
        return switch_port;
    return wire == Wire::Native ? INCXDP_UDP_PORT : SWITCHML_UDP_PORT_MIN;
}

uint32_t CommConfig::effective_elems_per_packet() const {
    if (elems_per_packet != 0)
        return elems_per_packet;
    uint32_t fit = mtu ? max_elems_for_mtu(wire, mtu) : UINT32_MAX;
    if (wire == Wire::Native) {
        uint32_t n = std::min<uint32_t>(INCXDP_MAX_ELEMS, fit);
        return std::max<uint32_t>(n / INCXDP_ELEM_QUANTUM * INCXDP_ELEM_QUANTUM,
                                  INCXDP_ELEM_QUANTUM);
    }
    for (int code = SWITCHML_SIZE_MAX; code > 0; --code)
        if (SWITCHML_ELEMS(code) <= fit)
            return SWITCHML_ELEMS(code);
    return SWITCHML_ELEMS(0);
}

void CommConfig::validate() const {
    auto bad = [this](const std::string &why) {
        return std::invalid_argument(
            fmt::format("communicator config (rank {}, job {}): {}", rank, job, why));
    };
    if (world_size == 0 || world_size > INCXDP_MAX_WORKERS)
        throw bad(fmt::format("world_size {} is not in 1..{}", world_size, INCXDP_MAX_WORKERS));
    if (rank >= world_size)
        throw bad(fmt::format("rank {} is not below world_size {}", rank, world_size));
    if (switch_ip.empty() || local_ip.empty())
        throw bad("switch_ip and local_ip must be set");
    if (window == 0 || window > kMaxWindow)
        throw bad(fmt::format("window {} is not in 1..{}", window, kMaxWindow));
    uint32_t p = effective_elems_per_packet();
    if (wire == Wire::Native) {
        if (p == 0 || p % INCXDP_ELEM_QUANTUM != 0 || p > INCXDP_MAX_ELEMS)
            throw bad(fmt::format("elems_per_packet {} must be a multiple of {} in {}..{} for "
                                  "the native wire",
                                  p, INCXDP_ELEM_QUANTUM, INCXDP_ELEM_QUANTUM, INCXDP_MAX_ELEMS));
    } else if (detail::switchml_size_code(p) < 0) {
        throw bad(fmt::format("elems_per_packet {} must be 32, 64, 128 or 256 for SwitchML", p));
    }
    if (mtu != 0 && p > max_elems_for_mtu(wire, mtu))
        throw bad(fmt::format("{} elements per packet ({} B IP packet) exceed the link MTU {}", p,
                              kIpUdpLen + detail::header_len(wire) + 4 * p, mtu));
    if (timeout.count() <= 0 || max_timeout < timeout)
        throw bad("timeout must be > 0 and max_timeout >= timeout");
    if (deadline.count() <= 0)
        throw bad("deadline must be > 0");
    if (batch == 0 || batch > kMaxBatch)
        throw bad(fmt::format("batch {} is not in 1..{}", batch, kMaxBatch));
}

CommConfig CommConfig::from_topology(const std::string &path, uint32_t job_id, uint32_t rank) {
    try {
        auto topo = topo::Topology::load_file(path);
        const auto &job = topo.job(job_id);
        if (rank >= job.workers.size())
            throw std::invalid_argument(
                fmt::format("job {} has {} workers (ranks 0..{}), there is no rank {}", job_id,
                            job.workers.size(), job.workers.size() - 1, rank));
        const auto &host = topo.node(job.workers[rank]);
        const auto &sw = topo.node(job.switch_name);
        CommConfig c;
        c.rank = rank;
        c.world_size = uint32_t(job.workers.size());
        c.job = job_id;
        c.switch_ip = sw.ip;
        c.local_ip = host.ip;
        c.local_port = job.worker_port;
        c.window = std::min(kDefaultWindow, job.slots);
        c.mtu = topo.mtu > 0 ? uint32_t(topo.mtu) : 0;
        return c;
    } catch (const std::exception &e) {
        throw std::invalid_argument(fmt::format("topology {}: {}", path, e.what()));
    }
}

} // namespace incxdp
