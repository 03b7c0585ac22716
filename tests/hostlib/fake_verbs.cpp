// SPDX-License-Identifier: BSD-2-Clause
// fake0: an RDMA device in place of libibverbs.
// Linked into executables in place of libibverbs (which they do not link,
// so a verbs call the fake lacks fails the link), so VerbsSession's device
// path runs where there is no RDMA device. One device, one ACTIVE Ethernet
// port (MTU 2048), GIDs 0: RoCEv1 and 2: RoCEv2 of 192.0.2.1, 1: RoCEv2
// fe80::1, 3: empty. RC between its own QPs: a SEND
// lands in the destination QP's next receive WR after `delay` (parked while
// there is none, as endless RNR retries would), then its ACK completes the
// send after another `delay`; everything in order. It refuses or records
// what a device would refuse or what would go wrong unnoticed: QP states and
// attribute masks, PSNs that disagree across the connection, SGEs outside
// their MR, send queue overflow (a WR's slot is freed when a signaled
// completion at or after it is polled), CQ overrun, CQ events not acked
// before ibv_destroy_cq (a real device blocks there).
//
// Wire mode (INCXDP_FAKE_VERBS_IP=<IPv4 of a local netdev>): the GIDs hold
// that address, the port's MTU is the netdev's less 80 B (as rxe's), and a
// QP whose destination GID is another IPv4 address speaks RoCEv2 RC on the
// netdev through an AF_PACKET socket, as Soft-RoCE would: SEND_ONLY_IMM
// frames with AckReq and ICRC, its UDP source port 0xC000 | QPN, go-back-N
// on a sequence NAK or the ACK timeout (retry_cnt, then the QP fails); as
// responder in PSN order, an ACK when the frame asks, the ACK again for a
// duplicate, one NAK per gap. That lets a real switch (the XDP engine in
// the netns topologies) be the peer of a VerbsSession.
#include "fake_verbs.h"
#include "roce_frame.h"
#include "verbs_session.h"

#include <incxdp/transport.h>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace fakeverbs {
namespace {

using Clock = std::chrono::steady_clock;
using incxdp::detail::RoceEndpoint;
constexpr uint32_t kGidCount = 4;
constexpr uint32_t kPsnMask = 0xFFFFFF;

// Wire mode: the netdev that holds INCXDP_FAKE_VERBS_IP, or none.
struct WireDev {
    std::string ip, ifname;
    uint32_t ifindex = 0, mtu = 0;
};

const WireDev *wire_dev() {
    static const std::optional<WireDev> dev = []() -> std::optional<WireDev> {
        const char *ip = std::getenv("INCXDP_FAKE_VERBS_IP");
        if (!ip || !*ip)
            return std::nullopt;
        WireDev d;
        d.ip = ip;
        ifaddrs *all = nullptr;
        if (getifaddrs(&all) == 0) {
            char buf[INET_ADDRSTRLEN];
            for (ifaddrs *a = all; a; a = a->ifa_next)
                if (a->ifa_addr && a->ifa_addr->sa_family == AF_INET &&
                    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in *>(a->ifa_addr)->sin_addr,
                              buf, sizeof(buf)) &&
                    d.ip == buf)
                    d.ifname = a->ifa_name;
            freeifaddrs(all);
        }
        if (d.ifname.empty()) {
            std::fprintf(stderr, "fake0: no netdev holds INCXDP_FAKE_VERBS_IP %s\n", ip);
            std::abort();
        }
        d.ifindex = if_nametoindex(d.ifname.c_str());
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        ifreq r{};
        std::strncpy(r.ifr_name, d.ifname.c_str(), IFNAMSIZ - 1);
        d.mtu = fd >= 0 && ioctl(fd, SIOCGIFMTU, &r) == 0 ? uint32_t(r.ifr_mtu) : 1500;
        if (fd >= 0)
            close(fd);
        return d;
    }();
    return dev ? &*dev : nullptr;
}

// The port's MTU: 2048, or in wire mode rxe's choice for the netdev's MTU.
ibv_mtu active_mtu() {
    const WireDev *d = wire_dev();
    if (!d)
        return IBV_MTU_2048;
    ibv_mtu m = IBV_MTU_256;
    for (ibv_mtu c : {IBV_MTU_512, IBV_MTU_1024, IBV_MTU_2048, IBV_MTU_4096})
        if (incxdp::detail::mtu_bytes(c) + 80 <= d->mtu)
            m = c;
    return m;
}

int32_t psn_diff(uint32_t a, uint32_t b) {
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
    void start_net(); // wire mode, at the first wire QP
    void at(Clock::duration after, std::function<void()> fn) {
        events.emplace(Clock::now() + after, std::move(fn));
        cv.notify_all();
    }
    void error(const std::string &e) { errors += e + "\n"; }
};

World &W() {
    static World w;
    return w;
}

ibv_gid gid_at(uint32_t i, uint32_t *type) {
    ibv_gid g{};
    if (i == 1) {
        g.raw[0] = 0xfe;
        g.raw[1] = 0x80;
        g.raw[15] = 1;
        *type = IBV_GID_TYPE_ROCE_V2;
    } else {
        g = incxdp::detail::ipv4_mapped_gid(wire_dev() ? wire_dev()->ip : "192.0.2.1");
        *type = i == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
    }
    return g;
}

uint32_t packets(size_t len, ibv_mtu mtu) {
    uint32_t m = incxdp::detail::mtu_bytes(mtu);
    return len == 0 ? 1 : uint32_t((len + m - 1) / m);
}

bool sge_ok(const ibv_sge &s) {
    for (ibv_mr *mr : W().mrs)
        if (mr->lkey == s.lkey && s.addr >= uintptr_t(mr->addr) &&
            s.addr + s.length <= uintptr_t(mr->addr) + mr->length)
            return true;
    return false;
}

Qp *qp_of(uint32_t qpn) {
    auto it = W().qps.find(qpn);
    return it == W().qps.end() ? nullptr : it->second;
}

void push_cqe(ibv_cq *c, const ibv_wc &wc, uint64_t seq) {
    Cq *cq = reinterpret_cast<Cq *>(c);
    if (cq->q.size() >= size_t(c->cqe))
        W().error("CQ overrun");
    cq->q.emplace_back(wc, seq);
    if (cq->armed && c->channel) {
        cq->armed = false;
        ssize_t r = write(c->channel->refcnt, &cq, sizeof(cq)); // the pipe's write end
        (void)r;
    }
}

ibv_wc wc_for(Qp *q, uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = st;
    wc.opcode = op;
    wc.qp_num = q->qp.qp_num;
    return wc;
}

// The requester saw no ACK through every retry: the oldest unACKed WR
// fails, the rest flush.
void retry_exceeded(uint32_t qpn, uint64_t seq) {
    Qp *q = qp_of(qpn);
    if (!q || q->acked > seq || q->qp.state == IBV_QPS_ERR)
        return;
    q->qp.state = IBV_QPS_ERR;
    bool first = true;
    for (auto &[s, w] : q->inflight) {
        push_cqe(
            q->qp.send_cq,
            wc_for(q, w.first, first ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND), s);
        first = false;
    }
    q->inflight.clear();
    for (auto &r : q->rq)
        push_cqe(q->qp.recv_cq, wc_for(q, r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV), ~0ull);
    q->rq.clear();
    q->rq_sge.clear();
}

void no_ack_for(Qp *src, uint64_t seq) {
    // 4.096 us * 2^timeout per try, 1 + retry_cnt tries
    auto t = std::chrono::nanoseconds(int64_t(4096) << src->timeout) * (1 + src->retry_cnt);
    uint32_t qpn = src->qp.qp_num;
    W().at(std::min<Clock::duration>(t, std::chrono::seconds(2)),
           [qpn, seq] { retry_exceeded(qpn, seq); });
}

// ACKs are cumulative: everything up to seq is done.
void ack(uint32_t qpn, uint64_t seq) {
    Qp *q = qp_of(qpn);
    if (!q || q->qp.state == IBV_QPS_ERR)
        return;
    while (!q->inflight.empty() && q->inflight.begin()->first <= seq) {
        auto [s, w] = *q->inflight.begin();
        if (w.second)
            push_cqe(q->qp.send_cq, wc_for(q, w.first, IBV_WC_SUCCESS, IBV_WC_SEND), s);
        q->inflight.erase(q->inflight.begin());
    }
    q->acked = std::max(q->acked, seq + 1);
}

// The responder takes m into its next receive WR.
void take(Qp *dst, Msg &m) {
    Qp *src = qp_of(m.src);
    ibv_recv_wr r = dst->rq.front();
    ibv_sge sge = dst->rq_sge.front();
    dst->rq.pop_front();
    dst->rq_sge.pop_front();
    if (m.psn != dst->rq_psn)
        W().error(fmt::format("QP 0x{:x} got PSN 0x{:06x} from 0x{:x}, expected 0x{:06x}",
                              dst->qp.qp_num, m.psn, m.src, dst->rq_psn));
    dst->rq_psn = (dst->rq_psn + packets(m.data.size(), dst->mtu)) & 0xFFFFFF;
    if (m.data.size() > (r.num_sge ? sge.length : 0)) {
        push_cqe(dst->qp.recv_cq, wc_for(dst, r.wr_id, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV), ~0ull);
        dst->qp.state = IBV_QPS_ERR;
        if (src) {
            auto it = src->inflight.find(m.seq);
            if (it != src->inflight.end())
                push_cqe(src->qp.send_cq,
                         wc_for(src, it->second.first, IBV_WC_REM_INV_REQ_ERR, IBV_WC_SEND), m.seq);
            src->qp.state = IBV_QPS_ERR;
        }
        return;
    }
    if (!m.data.empty())
        std::memcpy(reinterpret_cast<void *>(sge.addr), m.data.data(), m.data.size());
    ibv_wc wc = wc_for(dst, r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV);
    wc.byte_len = uint32_t(m.data.size());
    wc.imm_data = m.imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.src_qp = m.src;
    push_cqe(dst->qp.recv_cq, wc, ~0ull);
    if (!src)
        return;
    if (W().no_ack.count(dst->qp.qp_num)) {
        no_ack_for(src, m.seq);
        return;
    }
    uint32_t sq = m.src;
    uint64_t seq = m.seq;
    W().at(W().delay, [sq, seq] { ack(sq, seq); });
}

void deliver(Msg m) {
    Qp *dst = qp_of(m.dst);
    Qp *src = qp_of(m.src);
    if (!dst || dst->qp.state < IBV_QPS_RTR || dst->qp.state == IBV_QPS_ERR || dst->dest != m.src) {
        if (src)
            no_ack_for(src, m.seq); // nobody answers
        return;
    }
    if (dst->rq.empty()) {
        dst->parked.push_back(std::move(m));
        return;
    }
    take(dst, m);
}

// ---- wire mode -------------------------------------------------------------

void wire_out(const Qp *q, std::span<const std::byte> frame) {
    sockaddr_ll to{};
    to.sll_family = AF_PACKET;
    to.sll_protocol = htons(ETH_P_IP);
    to.sll_ifindex = int(wire_dev()->ifindex);
    to.sll_halen = 6;
    std::memcpy(to.sll_addr, q->ep.dst_mac.data(), 6);
    // A full queue is a lost frame, which RC recovers; anything else is ours.
    if (sendto(W().pkt_fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr *>(&to),
               sizeof(to)) < 0 &&
        errno != ENOBUFS && errno != EAGAIN)
        W().error(fmt::format("wire: sendto on {}: {}", wire_dev()->ifname, strerror(errno)));
}

void wire_ack(Qp *q, uint32_t syndrome, uint32_t psn) {
    std::array<std::byte, 128> f{};
    size_t n = incxdp::detail::build_roce_frame(f, q->ep, ROCE_OP_ACK, psn & kPsnMask, false,
                                                syndrome | (q->msn & kPsnMask), std::nullopt, {});
    wire_out(q, std::span(f.data(), n));
    (syndrome == ROCE_AETH_ACK ? W().wstats.acks_out : W().wstats.naks_out)++;
}

void wire_send(Qp *q, const Msg &m) {
    std::vector<std::byte> f(incxdp::detail::kRoceImmPayloadOff + m.data.size() + 64);
    f.resize(incxdp::detail::build_roce_frame(f, q->ep, ROCE_OP_SEND_ONLY_IMM, m.psn, true,
                                              std::nullopt, ntohl(m.imm), m.data));
    if (q->unacked.empty()) {
        q->progress = Clock::now();
        q->retries = 0;
    }
    wire_out(q, f);
    W().wstats.sends++;
    q->unacked[m.seq] = std::move(f);
    q->psn_of[m.seq] = m.psn;
}

// ACKs are cumulative: every SEND at or before psn is done.
void wire_acked(Qp *q, uint32_t psn) {
    std::optional<uint64_t> last;
    for (auto it = q->psn_of.begin(); it != q->psn_of.end() && psn_diff(psn, it->second) >= 0;) {
        last = it->first;
        q->unacked.erase(it->first);
        it = q->psn_of.erase(it);
    }
    if (!last)
        return;
    ack(q->qp.qp_num, *last);
    q->progress = Clock::now();
    q->retries = 0;
}

// Go back N: every unACKed SEND from psn on, in order.
void wire_resend_from(Qp *q, uint32_t psn) {
    for (const auto &[seq, f] : q->unacked)
        if (psn_diff(q->psn_of[seq], psn) >= 0) {
            wire_out(q, f);
            W().wstats.resends++;
        }
    q->progress = Clock::now();
}

// A frame for us: the peer's ACK/NAK of our SENDs, or its SENDs.
void wire_in(std::span<const std::byte> frame) {
    using incxdp::detail::RoceParse;
    incxdp::detail::RoceFrameView v;
    RoceParse r = incxdp::detail::parse_roce(frame, v, true);
    if (r == RoceParse::NotRoce)
        return;
    uint32_t me = 0;
    inet_pton(AF_INET, wire_dev()->ip.c_str(), &me);
    if (v.dst_ip != me)
        return;
    Qp *q = r == RoceParse::Ok ? qp_of(v.dqpn) : nullptr;
    if (!q || !q->wire || q->qp.state < IBV_QPS_RTR || q->qp.state == IBV_QPS_ERR) {
        W().wstats.bad++;
        return;
    }
    if (v.opcode == ROCE_OP_ACK) {
        uint32_t syndrome = *v.aeth & 0xFF000000u;
        if ((syndrome & 0xE0000000u) == 0) { // ACK
            W().wstats.acks_in++;
            wire_acked(q, v.psn);
        } else if (syndrome == ROCE_AETH_NAK_SEQ) { // expected psn: all before it arrived
            W().wstats.naks_in++;
            wire_acked(q, v.psn - 1);
            wire_resend_from(q, v.psn);
        }
        return;
    }
    if (v.opcode != ROCE_OP_SEND_ONLY_IMM && v.opcode != ROCE_OP_SEND_ONLY)
        return;
    int32_t d = psn_diff(v.psn, q->epsn);
    if (d < 0) { // a duplicate: it lost our ACK
        W().wstats.duplicates++;
        wire_ack(q, ROCE_AETH_ACK, q->epsn - 1);
        return;
    }
    if (d > 0) { // ahead: one NAK per gap
        if (!q->nak_sent)
            wire_ack(q, ROCE_AETH_NAK_SEQ, q->epsn);
        q->nak_sent = true;
        return;
    }
    Msg m;
    m.src = 0; // no local QP: take() must not ACK in-process
    m.dst = q->qp.qp_num;
    m.psn = v.psn;
    m.imm = htonl(v.imm.value_or(0));
    m.data.assign(v.payload.begin(), v.payload.end());
    q->nak_sent = false;
    q->epsn = (q->epsn + 1) & kPsnMask;
    q->msn = (q->msn + 1) & kPsnMask;
    W().wstats.results++;
    if (q->rq.empty()) {
        q->parked.push_back(std::move(m)); // taken; the next receive WR completes it
    } else {
        take(q, m);
    }
    if (v.ackreq)
        wire_ack(q, ROCE_AETH_ACK, v.psn);
}

// The requester's ACK timer: go back N, retry_cnt times, then fail the QP.
void wire_timers() {
    const auto now = Clock::now();
    for (auto &[qpn, q] : W().qps) {
        if (!q->wire || q->unacked.empty() || q->qp.state != IBV_QPS_RTS)
            continue;
        if (now - q->progress < std::chrono::nanoseconds(int64_t(4096) << q->timeout))
            continue;
        if (q->retries >= q->retry_cnt) {
            retry_exceeded(qpn, q->unacked.begin()->first);
            q->unacked.clear();
            q->psn_of.clear();
            continue;
        }
        q->retries++;
        wire_resend_from(q, q->psn_of.begin()->second);
    }
}

void World::start_net() {
    const WireDev &d = *wire_dev();
    pkt_fd = socket(AF_PACKET, SOCK_RAW | SOCK_CLOEXEC, htons(ETH_P_IP));
    sockaddr_ll at{};
    at.sll_family = AF_PACKET;
    at.sll_protocol = htons(ETH_P_IP);
    at.sll_ifindex = int(d.ifindex);
    int big = 16 << 20;
    if (pkt_fd < 0 || bind(pkt_fd, reinterpret_cast<sockaddr *>(&at), sizeof(at)) != 0) {
        std::fprintf(stderr, "fake0: AF_PACKET socket on %s: %s\n", d.ifname.c_str(),
                     strerror(errno));
        std::abort();
    }
    setsockopt(pkt_fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
    // Held so that the stack does not answer the switch's frames with ICMP
    // port unreachable; never read.
    udp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in u{};
    u.sin_family = AF_INET;
    u.sin_port = htons(INCXDP_ROCE_UDP_PORT);
    inet_pton(AF_INET, d.ip.c_str(), &u.sin_addr);
    if (udp_fd >= 0)
        (void)bind(udp_fd, reinterpret_cast<sockaddr *>(&u), sizeof(u));
    net = std::thread([this] {
        std::vector<std::byte> buf(1 << 16);
        for (;;) {
            pollfd p{pkt_fd, POLLIN, 0};
            poll(&p, 1, 1);
            std::lock_guard lk(mu);
            if (stop)
                return;
            for (int i = 0; i < 512; ++i) {
                sockaddr_ll from{};
                socklen_t fl = sizeof(from);
                ssize_t n = recvfrom(pkt_fd, buf.data(), buf.size(), MSG_DONTWAIT,
                                     reinterpret_cast<sockaddr *>(&from), &fl);
                if (n <= 0)
                    break;
                if (from.sll_pkttype != PACKET_OUTGOING)
                    wire_in(std::span(buf.data(), size_t(n)));
            }
            wire_timers();
        }
    });
}

int op_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (qp->state == IBV_QPS_ERR) { // accepted and flushed, as mlx5 and rxe do
            push_cqe(qp->send_cq, wc_for(q, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND),
                     q->posted++);
            continue;
        }
        if (qp->state != IBV_QPS_RTS)
            return EINVAL;
        if (q->posted - q->freed >= q->cap.max_send_wr) {
            W().error(fmt::format("send queue overflow on QP 0x{:x}: {} WRs not freed", qp->qp_num,
                                  q->posted - q->freed));
            return ENOMEM;
        }
        if (wr->opcode != IBV_WR_SEND_WITH_IMM || wr->num_sge > 1 ||
            (wr->num_sge && !sge_ok(wr->sg_list[0]))) {
            W().error("bad send WR (opcode, SGE count or SGE outside its MR)");
            return EINVAL;
        }
        Msg m;
        m.src = qp->qp_num;
        m.dst = q->dest;
        m.psn = q->sq_psn;
        m.imm = wr->imm_data;
        m.seq = q->posted++;
        if (wr->num_sge) {
            auto *p = reinterpret_cast<const std::byte *>(wr->sg_list[0].addr);
            m.data.assign(p, p + wr->sg_list[0].length);
        }
        q->inflight[m.seq] = {wr->wr_id, (wr->send_flags & IBV_SEND_SIGNALED) != 0};
        q->sent_psns.push_back(q->sq_psn);
        q->sq_psn = (q->sq_psn + packets(m.data.size(), q->mtu)) & 0xFFFFFF;
        if (q->wire)
            wire_send(q, m);
        else
            W().at(W().delay, [m = std::move(m)]() mutable { deliver(std::move(m)); });
    }
    *bad = nullptr;
    return 0;
}

int op_post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_ERR)
            return EINVAL;
        if (q->rq.size() >= q->cap.max_recv_wr)
            return ENOMEM;
        if (wr->num_sge > 1 || (wr->num_sge && !sge_ok(wr->sg_list[0]))) {
            W().error("bad receive WR (SGE count or SGE outside its MR)");
            return EINVAL;
        }
        q->rq.push_back(*wr);
        q->rq_sge.push_back(wr->num_sge ? wr->sg_list[0] : ibv_sge{});
    }
    *bad = nullptr;
    while (!q->parked.empty() && !q->rq.empty() && qp->state != IBV_QPS_ERR) {
        Msg m = std::move(q->parked.front());
        q->parked.pop_front();
        take(q, m);
    }
    return 0;
}

int op_poll_cq(ibv_cq *c, int n, ibv_wc *wc) {
    std::lock_guard lk(W().mu);
    Cq *cq = reinterpret_cast<Cq *>(c);
    int k = 0;
    for (; k < n && !cq->q.empty(); ++k) {
        auto [w, seq] = cq->q.front();
        cq->q.pop_front();
        wc[k] = w;
        if (seq != ~0ull)
            if (Qp *q = qp_of(w.qp_num))
                q->freed = std::max(q->freed, seq + 1); // the driver frees WQEs up to here
    }
    return k;
}

int op_req_notify_cq(ibv_cq *c, int) {
    std::lock_guard lk(W().mu);
    reinterpret_cast<Cq *>(c)->armed = true;
    return 0;
}

} // namespace

void set_no_ack(uint32_t qpn) {
    std::lock_guard lk(W().mu);
    W().no_ack.insert(qpn);
}

std::vector<uint32_t> sent_psns(uint32_t qpn) {
    std::lock_guard lk(W().mu);
    Qp *q = qp_of(qpn);
    return q ? q->sent_psns : W().psns_of_destroyed[qpn];
}

WireStats wire_stats() {
    std::lock_guard lk(W().mu);
    return W().wstats;
}

std::string take_errors() {
    std::lock_guard lk(W().mu);
    return std::exchange(W().errors, std::string());
}

} // namespace fakeverbs

using namespace fakeverbs;

extern "C" {

ibv_device **(ibv_get_device_list)(int *n) {
    static ibv_device dev = [] {
        ibv_device d{};
        std::strcpy(d.name, "fake0");
        d.node_type = IBV_NODE_CA;
        d.transport_type = IBV_TRANSPORT_IB;
        return d;
    }();
    *n = 1;
    return new ibv_device *[2] { &dev, nullptr };
}

void ibv_free_device_list(ibv_device **list) {
    delete[] list;
}

const char *ibv_get_device_name(ibv_device *d) {
    return d->name;
}

// A whole verbs_context, of which the inline verbs look at the ibv_context
// at its end (they step back to the start only when abi_compat says so).
ibv_context *ibv_open_device(ibv_device *d) {
    ibv_context *ctx = &(new verbs_context{})->context;
    ctx->device = d;
    ctx->ops.poll_cq = op_poll_cq;
    ctx->ops.req_notify_cq = op_req_notify_cq;
    ctx->ops.post_send = op_post_send;
    ctx->ops.post_recv = op_post_recv;
    ctx->abi_compat = nullptr; // not extended: ibv_query_port() takes the plain path
    return ctx;
}

int ibv_close_device(ibv_context *ctx) {
    delete reinterpret_cast<verbs_context *>(reinterpret_cast<char *>(ctx) -
                                             offsetof(verbs_context, context));
    return 0;
}

int ibv_query_device(ibv_context *, ibv_device_attr *a) {
    *a = ibv_device_attr{};
    a->phys_port_cnt = 1;
    a->max_qp_wr = 4096;
    a->max_cqe = 65536;
    a->max_sge = 1;
    return 0;
}

// The inline ibv_query_port() hands over a whole ibv_port_attr.
int(ibv_query_port)(ibv_context *, uint8_t port, _compat_ibv_port_attr *compat) {
    if (port != 1)
        return EINVAL;
    auto *a = reinterpret_cast<ibv_port_attr *>(compat);
    a->state = IBV_PORT_ACTIVE;
    a->max_mtu = IBV_MTU_4096;
    a->active_mtu = active_mtu();
    a->gid_tbl_len = kGidCount;
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
}

int _ibv_query_gid_ex(ibv_context *, uint32_t port, uint32_t index, ibv_gid_entry *e, uint32_t,
                      size_t) {
    if (port != 1 || index >= kGidCount - 1)
        return ENODATA;
    *e = ibv_gid_entry{};
    e->gid = gid_at(index, &e->gid_type);
    e->gid_index = index;
    e->port_num = port;
    return 0;
}

ibv_pd *ibv_alloc_pd(ibv_context *ctx) {
    return new ibv_pd{ctx, 0};
}
int ibv_dealloc_pd(ibv_pd *pd) {
    delete pd;
    return 0;
}

ibv_comp_channel *ibv_create_comp_channel(ibv_context *ctx) {
    int fds[2];
    if (pipe(fds) != 0)
        return nullptr;
    // The read end is the channel's fd; the write end hides in refcnt.
    return new ibv_comp_channel{ctx, fds[0], fds[1]};
}

int ibv_destroy_comp_channel(ibv_comp_channel *ch) {
    close(ch->fd);
    close(ch->refcnt);
    delete ch;
    return 0;
}

ibv_cq *ibv_create_cq(ibv_context *ctx, int cqe, void *cq_context, ibv_comp_channel *ch, int) {
    auto *cq = new Cq;
    cq->cq.context = ctx;
    cq->cq.channel = ch;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    return &cq->cq;
}

int ibv_destroy_cq(ibv_cq *c) {
    std::lock_guard lk(W().mu);
    Cq *cq = reinterpret_cast<Cq *>(c);
    if (cq->events != cq->acked)
        W().error(fmt::format("ibv_destroy_cq with {} of {} events not acked",
                              cq->events - cq->acked, cq->events));
    delete cq;
    return 0;
}

int ibv_get_cq_event(ibv_comp_channel *ch, ibv_cq **cq, void **cq_context) {
    Cq *c = nullptr;
    if (read(ch->fd, &c, sizeof(c)) != ssize_t(sizeof(c)))
        return -1;
    std::lock_guard lk(W().mu);
    c->events++;
    *cq = &c->cq;
    *cq_context = c->cq.cq_context;
    return 0;
}

void ibv_ack_cq_events(ibv_cq *c, unsigned int n) {
    std::lock_guard lk(W().mu);
    reinterpret_cast<Cq *>(c)->acked += n;
}

ibv_qp *ibv_create_qp(ibv_pd *pd, ibv_qp_init_attr *a) {
    if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq || a->cap.max_send_wr > 4096 ||
        a->cap.max_recv_wr > 4096 || a->cap.max_send_sge > 1 || a->cap.max_recv_sge > 1) {
        errno = EINVAL;
        return nullptr;
    }
    std::lock_guard lk(W().mu);
    auto *q = new Qp;
    q->qp.context = pd->context;
    q->qp.qp_context = a->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq;
    q->qp.qp_num = W().next_qpn++;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    q->cap = a->cap;
    W().qps[q->qp.qp_num] = q;
    return &q->qp;
}

int ibv_destroy_qp(ibv_qp *qp) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    W().psns_of_destroyed[qp->qp_num] = q->sent_psns;
    W().qps.erase(qp->qp_num);
    delete q;
    return 0;
}

int ibv_modify_qp(ibv_qp *qp, ibv_qp_attr *a, int mask) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    auto need = [&](int required, const char *what) {
        if ((mask & required) == required)
            return true;
        W().error(
            fmt::format("modify_qp {}: mask 0x{:x} lacks 0x{:x}", what, mask, required & ~mask));
        return false;
    };
    if (!(mask & IBV_QP_STATE))
        return EINVAL;
    if (qp->state == IBV_QPS_RESET && a->qp_state == IBV_QPS_INIT) {
        if (!need(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT") ||
            a->port_num != 1)
            return EINVAL;
    } else if (qp->state == IBV_QPS_INIT && a->qp_state == IBV_QPS_RTR) {
        if (!need(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                  "RTR"))
            return EINVAL;
        uint32_t type = 0;
        const ibv_global_route &g = a->ah_attr.grh;
        if (!a->ah_attr.is_global || a->ah_attr.port_num != 1 || g.sgid_index >= kGidCount - 1 ||
            (gid_at(g.sgid_index, &type), type) != IBV_GID_TYPE_ROCE_V2 ||
            a->path_mtu > active_mtu() || a->dest_qp_num > 0xFFFFFF || a->rq_psn > 0xFFFFFF)
            return EINVAL;
        bool reachable = false; // loopback only: the destination is one of our GIDs
        for (uint32_t i = 0; i < kGidCount - 1; ++i) {
            ibv_gid mine = gid_at(i, &type);
            reachable |= type == IBV_GID_TYPE_ROCE_V2 && std::memcmp(mine.raw, g.dgid.raw, 16) == 0;
        }
        if (!reachable) {
            // Wire mode: another IPv4 node, reached through the netdev.
            static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            if (!wire_dev() || std::memcmp(g.dgid.raw, v4, 12) != 0)
                return ENETUNREACH;
            char dst[INET_ADDRSTRLEN];
            inet_ntop(AF_INET, &g.dgid.raw[12], dst, sizeof(dst));
            try {
                incxdp::LinkInfo l = incxdp::resolve_link(wire_dev()->ip, dst, wire_dev()->ifname);
                std::copy(l.local_mac.begin(), l.local_mac.end(), q->ep.src_mac.begin());
                std::copy(l.remote_mac.begin(), l.remote_mac.end(), q->ep.dst_mac.begin());
            } catch (const std::exception &) {
                return ENETUNREACH; // no neighbour entry: what a device says too
            }
            inet_pton(AF_INET, wire_dev()->ip.c_str(), &q->ep.src_ip);
            std::memcpy(&q->ep.dst_ip, &g.dgid.raw[12], 4);
            q->ep.src_port = uint16_t(0xC000 | (qp->qp_num & 0x3FFF));
            q->ep.dst_qpn = a->dest_qp_num;
            q->epsn = a->rq_psn;
            q->wire = true;
            if (W().pkt_fd < 0)
                W().start_net();
        }
        q->dest = a->dest_qp_num;
        q->rq_psn = a->rq_psn;
        q->mtu = a->path_mtu;
    } else if (qp->state == IBV_QPS_RTR && a->qp_state == IBV_QPS_RTS) {
        if (!need(IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                  "RTS") ||
            a->sq_psn > 0xFFFFFF)
            return EINVAL;
        q->sq_psn = a->sq_psn;
        q->timeout = a->timeout;
        q->retry_cnt = a->retry_cnt;
    } else {
        W().error(
            fmt::format("modify_qp: no transition {} -> {}", int(qp->state), int(a->qp_state)));
        return EINVAL;
    }
    qp->state = a->qp_state;
    return 0;
}

ibv_mr *(ibv_reg_mr)(ibv_pd *pd, void *addr, size_t length, int) {
    std::lock_guard lk(W().mu);
    uint32_t key = W().next_key++;
    auto *mr = new ibv_mr{pd->context, pd, addr, length, key, key, key};
    W().mrs.push_back(mr);
    return mr;
}

int ibv_dereg_mr(ibv_mr *mr) {
    std::lock_guard lk(W().mu);
    std::erase(W().mrs, mr);
    delete mr;
    return 0;
}

const char *ibv_wc_status_str(ibv_wc_status s) {
    switch (s) {
    case IBV_WC_SUCCESS:
        return "success";
    case IBV_WC_LOC_LEN_ERR:
        return "local length error";
    case IBV_WC_WR_FLUSH_ERR:
        return "Work Request Flushed Error";
    case IBV_WC_REM_INV_REQ_ERR:
        return "remote invalid request error";
    case IBV_WC_RETRY_EXC_ERR:
        return "transport retry counter exceeded";
    default:
        return "other error";
    }
}

const char *ibv_port_state_str(ibv_port_state s) {
    return s == IBV_PORT_ACTIVE ? "ACTIVE" : "DOWN";
}

} // extern "C"
