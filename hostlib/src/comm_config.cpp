// SPDX-License-Identifier: BSD-2-Clause
// CommConfig: defaults, validation and the topology bootstrap (the carrier
// names and pairs: carrier.cpp).
#include <incxdp/communicator.h>
#include <incxdp/proto.h>
#include <incxdp/roce.h>
#include <incxdp/switchml.h>
#include <incxdp/topology.h>
#include <incxdp/tree.h>
#include <incxdp/fattree_plan.h>

#include "packet.h"
#include "roce_frame.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace incxdp {
namespace {

// 128 in flight per worker: the star's best window (docs/PERF.md); 256
// overflows veth's 256-frame rx rings in bursts.
constexpr uint32_t kDefaultWindow = 128;
// Roce trees: 1024 in flight per rank: fewer wake-ups per collective and
// faster recovery under loss than 128, while larger windows overflow the
// 256-frame veth rings below tree1248's root (docs/BENCH.md "A window of
// thousands"). The hosts' AF_XDP rx ring is sized to the window
// (communicator.cpp).
constexpr uint32_t kRoceDefaultWindow = 1024;
constexpr uint32_t kIpUdpLen = 20 + 8;
constexpr uint32_t kMaxWindow = INCXDP_SLOT_INDEX_MASK + 1; // 14-bit slot index
constexpr uint32_t kMaxBatch = 1024;                        // UIO_MAXIOV
// Roce: rank bits of a tree (subtree_ranks) and the IP packet around a payload.
constexpr uint32_t kMaxRoceRanks = 64;
constexpr uint32_t kRoceIpOverhead = 20 + 8 + 12 + ROCE_IMM_LEN + ROCE_ICRC_LEN;
// Roce: far below 2^23, so a PSN's distance to the window is unambiguous.
constexpr uint32_t kMaxRoceWindow = 1u << 20;
// Roce: a timeout sends one or two frames, never the window (strict order:
// a probe, docs/ROCE.md §4; host_order any: the overdue frames), so the
// timer can be short (docs/ROCE.md §4 compares timers).
constexpr std::chrono::milliseconds kRoceTimeout{2};
constexpr std::chrono::milliseconds kRoceMaxTimeout{500};

uint32_t max_roce_elems_for_mtu(uint32_t mtu) {
    return mtu <= kRoceIpOverhead ? 0 : (mtu - kRoceIpOverhead) / 4;
}

uint32_t max_elems_for_mtu(Wire w, uint32_t mtu) {
    uint32_t hdr = uint32_t(detail::header_len(w));
    if (mtu <= kIpUdpLen + hdr)
        return 0;
    return (mtu - kIpUdpLen - hdr) / 4;
}

// A rank of a roce-tree job: its connection to the leaf switch above it.
CommConfig roce_from_plan(const topo::TreePlan &plan, const topo::Topology &t, uint32_t rank) {
    if (rank >= plan.ranks.size())
        throw std::invalid_argument(fmt::format("job {} has {} workers (ranks 0..{}), there is no "
                                                "rank {}",
                                                plan.job, plan.ranks.size(), plan.ranks.size() - 1,
                                                rank));
    const topo::RoceConn &conn = plan.conn_of_rank(rank);
    const topo::TreeSwitch &leaf = plan.sw(conn.parent);
    CommConfig c;
    c.protocol = Protocol::Roce; // carrier Auto: AF_XDP unless the user picks verbs
    c.rank = rank;
    c.world_size = uint32_t(plan.ranks.size());
    c.job = plan.job;
    c.local_ip = conn.child_ip;
    c.local_port = INCXDP_ROCE_UDP_PORT;
    c.switch_ip = conn.parent_ip;
    c.switch_port = INCXDP_ROCE_UDP_PORT;
    c.roce.local_qpn = conn.child_qpn;
    c.roce.remote_qpn = conn.parent_qpn;
    c.roce.up_base = conn.up_base;
    c.roce.down_base = conn.down_base;
    c.roce.sport = conn.child_sport;
    c.roce.pool = leaf.pool_size;
    c.roce.any_order = plan.host_order == topo::HostOrder::Any;
    // The MACs stay zero: looked up on the host (interface, neighbour
    // table) when the transport opens, as AF_XDP does.
    c.window = std::min(kRoceDefaultWindow, leaf.pool_size);
    c.mtu = t.mtu > 0 ? uint32_t(t.mtu) : 0;
    c.timeout = kRoceTimeout;
    c.max_timeout = kRoceMaxTimeout;
    return c;
}

} // namespace

uint16_t CommConfig::effective_switch_port() const {
    if (roce_tree())
        return INCXDP_ROCE_UDP_PORT;
    if (switch_port != 0)
        return switch_port;
    return wire == Wire::Native ? INCXDP_UDP_PORT : SWITCHML_UDP_PORT_MIN;
}

uint32_t CommConfig::effective_elems_per_packet() const {
    if (elems_per_packet != 0)
        return elems_per_packet;
    if (roce_tree()) {
        uint32_t n =
            std::min(detail::kRoceDefaultElems, mtu ? max_roce_elems_for_mtu(mtu) : UINT32_MAX);
        return std::max<uint32_t>(n / INCXDP_ELEM_QUANTUM * INCXDP_ELEM_QUANTUM,
                                  INCXDP_ELEM_QUANTUM);
    }
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
    if (std::string why = carrier_refusal(protocol, carrier); !why.empty())
        throw bad(why);
    const bool roce_ = roce_tree();
    const bool own_frames = carrier != Carrier::Verbs; // else the device's
    uint32_t max_ranks = roce_ ? kMaxRoceRanks : INCXDP_MAX_WORKERS;
    if (world_size == 0 || world_size > max_ranks)
        throw bad(fmt::format("world_size {} is not in 1..{}", world_size, max_ranks));
    if (rank >= world_size)
        throw bad(fmt::format("rank {} is not below world_size {}", rank, world_size));
    if (switch_ip.empty() || local_ip.empty())
        throw bad("switch_ip and local_ip must be set");
    uint32_t max_window = roce_ ? kMaxRoceWindow : kMaxWindow;
    if (window == 0 || window > max_window)
        throw bad(fmt::format("window {} is not in 1..{}", window, max_window));
    uint32_t p = effective_elems_per_packet();
    if (roce_) {
        if (p == 0 || p % INCXDP_ELEM_QUANTUM != 0 || p > ROCE_MAX_ELEMS)
            throw bad(fmt::format("elems_per_packet {} must be a multiple of {} in {}..{} for "
                                  "roce (payload <= {} B)",
                                  p, INCXDP_ELEM_QUANTUM, INCXDP_ELEM_QUANTUM,
                                  ROCE_MAX_ELEMS, ROCE_MAX_PAYLOAD));
        if (mtu != 0 && p > max_roce_elems_for_mtu(mtu))
            throw bad(fmt::format("{} elements per packet ({} B IP packet) exceed the link MTU {}",
                                  p, kRoceIpOverhead + 4 * p, mtu));
        if (roce.pool != 0 && window > roce.pool)
            throw bad(fmt::format("window {} exceeds the job's slot pool of {} (a rank may not "
                                  "send idx + pool before it has the result of idx)",
                                  window, roce.pool));
        // A device picks its QPN and UDP source port itself.
        if ((own_frames && (roce.local_qpn == 0 || roce.local_qpn > ROCE_QPN_MASK)) ||
            roce.remote_qpn == 0 || roce.remote_qpn > ROCE_QPN_MASK)
            throw bad(fmt::format("roce QPNs {:#x} (local) and {:#x} (switch) must be in "
                                  "1..0xffffff; from_topology() fills them for a roce-tree job",
                                  roce.local_qpn, roce.remote_qpn));
        if (roce.up_base > ROCE_PSN_MASK || roce.down_base > ROCE_PSN_MASK)
            throw bad("roce PSN bases must be below 2^24");
        if (own_frames && roce.sport == 0)
            throw bad("roce UDP source port (roce.sport) is 0");
        if (carrier == Carrier::Verbs && (verbs.ack_timeout > 31 || verbs.retry_cnt > 7))
            throw bad(fmt::format("verbs ack_timeout {} must be <= 31 and retry_cnt {} <= 7",
                                  verbs.ack_timeout, verbs.retry_cnt));
    } else if (wire == Wire::Native) {
        if (p == 0 || p % INCXDP_ELEM_QUANTUM != 0 || p > INCXDP_MAX_ELEMS)
            throw bad(fmt::format("elems_per_packet {} must be a multiple of {} in {}..{} for "
                                  "the native wire",
                                  p, INCXDP_ELEM_QUANTUM, INCXDP_ELEM_QUANTUM, INCXDP_MAX_ELEMS));
    } else if (detail::switchml_size_code(p) < 0) {
        throw bad(fmt::format("elems_per_packet {} must be 32, 64, 128 or 256 for SwitchML", p));
    }
    if (!roce_ && mtu != 0 && p > max_elems_for_mtu(wire, mtu))
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
        if (job.kind == topo::JobKind::RoceTree)
            return roce_from_plan(topo::plan_tree(topo, job_id), topo, rank);
        if (rank >= job.workers.size())
            throw std::invalid_argument(
                fmt::format("job {} has {} workers (ranks 0..{}), there is no rank {}", job_id,
                            job.workers.size(), job.workers.size() - 1, rank));
        const auto &host = topo.node(job.workers[rank]);
        // A tree rank talks to its leaf switch, the tree switch it hangs below.
        const auto &sw = job.kind == topo::JobKind::Tree
                             ? topo.node(topo::build_agg_tree(topo, job.switch_name,
                                                              {job_id, job.workers, job.workers})
                                             .leaf.at(host.name))
                             : topo.node(job.switch_name);
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
