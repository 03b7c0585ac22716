// SPDX-License-Identifier: BSD-2-Clause
// fake0's state (fake_verbs.h says what fake0 is): the device's QPs, CQs
// and MRs, and the functions its three parts share. fake_verbs_core.cpp:
// RC between the device's own QPs, and the posting/polling ops;
// fake_verbs_wire.cpp: wire mode, RC with a peer on a netdev;
// fake_verbs_api.cpp: the libibverbs functions themselves. Everything runs
// under World::mu.
#pragma once

#include "fake_verbs.h"
#include "roce_frame.h"
#include "verbs_session.h"

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

namespace fakeverbs {

using Clock = std::chrono::steady_clock;
using incxdp::detail::RoceEndpoint;
constexpr uint32_t kGidCount = 4;
constexpr uint32_t kPsnMask = 0xFFFFFF;

// Wire mode: the netdev that holds INCXDP_FAKE_VERBS_IP.
struct WireDev {
    std::string ip, ifname;
    uint32_t ifindex = 0, mtu = 0;
};
/// nullptr unless INCXDP_FAKE_VERBS_IP is set (then it aborts if no netdev holds it).
const WireDev *wire_dev();
/// The port's MTU: 2048, or in wire mode rxe's choice for the netdev's MTU.
ibv_mtu active_mtu();

inline int32_t psn_diff(uint32_t a, uint32_t b) {
    return int32_t((a - b) << 8) >> 8;
}

struct Cq {
    ibv_cq cq{};
    std::deque<std::pair<ibv_wc, uint64_t>> q; // completion, send seq (or ~0)
    bool armed = false;
    unsigned events = 0, acked = 0;
};

struct Msg {
    uint32_t src = 0, dst = 0, psn = 0, imm = 0;
    std::vector<std::byte> data;
    uint64_t seq = 0;
};

struct Qp {
    ibv_qp qp{};
    ibv_qp_cap cap{};
    uint32_t dest = 0, sq_psn = 0, rq_psn = 0;
    ibv_mtu mtu = IBV_MTU_256;
    uint8_t timeout = 0, retry_cnt = 0;
    uint64_t posted = 0, freed = 0, acked = 0;
    std::map<uint64_t, std::pair<uint64_t, bool>> inflight; // seq -> wr_id, signaled
    std::deque<ibv_recv_wr> rq;
    std::deque<ibv_sge> rq_sge;
    std::deque<Msg> parked;
    std::vector<uint32_t> sent_psns;
    // Wire mode, a peer on the netdev: requester and responder state.
    bool wire = false;
    RoceEndpoint ep{};                             // our frames to the peer
    std::map<uint64_t, std::vector<std::byte>> unacked; // send seq -> its frame
    std::map<uint64_t, uint32_t> psn_of;          // send seq -> its PSN
    Clock::time_point progress{};                 // last ACK, or the send that started a wait
    uint32_t retries = 0;
    uint32_t epsn = 0; // responder: the next PSN to take (rq_psn moves as WRs complete)
    uint32_t msn = 0;
    bool nak_sent = false;
};

struct World {
    std::mutex mu;
    std::condition_variable cv;
    std::multimap<Clock::time_point, std::function<void()>> events; // equal times: FIFO
    std::map<uint32_t, Qp *> qps;
    std::vector<ibv_mr *> mrs;
    std::set<uint32_t> no_ack;
    std::map<uint32_t, std::vector<uint32_t>> psns_of_destroyed;
    std::string errors;
    std::chrono::microseconds delay{100};
    uint32_t next_qpn = wire_dev() ? 0x400 + 8 * uint32_t(getpid() % 4096) : 0xa1;
    uint32_t next_key = 0x100;
    bool stop = false;
    std::thread timer;
    // Wire mode: the AF_PACKET socket on the netdev and its thread.
    int pkt_fd = -1, udp_fd = -1;
    std::thread net;
    WireStats wstats;

    World() {
        timer = std::thread([this] {
            std::unique_lock lk(mu);
            while (!stop) {
                if (events.empty()) {
                    cv.wait(lk);
                } else if (events.begin()->first > Clock::now()) {
                    cv.wait_until(lk, events.begin()->first);
                } else {
                    auto fn = std::move(events.begin()->second);
                    events.erase(events.begin());
                    fn();
                }
            }
        });
    }
    ~World() {
        {
            std::lock_guard lk(mu);
            stop = true;
        }
        cv.notify_all();
        timer.join();
        if (net.joinable())
            net.join();
        if (std::getenv("INCXDP_FAKE_VERBS_STATS")) // wire mode, for a look at a run
            std::fprintf(stderr,
                         "fake0 wire: sends %lu resends %lu results %lu duplicates %lu acks_in %lu "
                         "naks_in %lu acks_out %lu naks_out %lu bad %lu\n",
                         wstats.sends, wstats.resends, wstats.results, wstats.duplicates,
                         wstats.acks_in, wstats.naks_in, wstats.acks_out, wstats.naks_out,
                         wstats.bad);
        if (pkt_fd >= 0)
            close(pkt_fd);
        if (udp_fd >= 0)
            close(udp_fd);
    }
    void start_net(); // wire mode, at the first wire QP (fake_verbs_wire.cpp)
    void at(Clock::duration after, std::function<void()> fn) {
        events.emplace(Clock::now() + after, std::move(fn));
        cv.notify_all();
    }
    void error(const std::string &e) { errors += e + "\n"; }
};

World &W();

// fake_verbs_core.cpp
ibv_gid gid_at(uint32_t i, uint32_t *type);
Qp *qp_of(uint32_t qpn);
void push_cqe(ibv_cq *c, const ibv_wc &wc, uint64_t seq);
ibv_wc wc_for(Qp *q, uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op);
void retry_exceeded(uint32_t qpn, uint64_t seq); ///< the QP fails: oldest WR errors, rest flush
void ack(uint32_t qpn, uint64_t seq);            ///< cumulative: every send WR up to seq done
void take(Qp *dst, Msg &m);                      ///< into the next receive WR
int op_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad);
int op_post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad);
int op_poll_cq(ibv_cq *c, int n, ibv_wc *wc);
int op_req_notify_cq(ibv_cq *c, int);

// fake_verbs_wire.cpp
/// RTR of a QP whose destination GID is not ours: resolve the peer on the
/// netdev and start the wire thread. 0, or ENETUNREACH (not wire mode, not
/// an IPv4 GID, no neighbour entry).
int wire_connect(Qp *q, const ibv_qp_attr &a);
void wire_send(Qp *q, const Msg &m); ///< a new SEND: on the wire, kept until ACKed

} // namespace fakeverbs
