// SPDX-License-Identifier: BSD-2-Clause
// fake0's wire mode (INCXDP_FAKE_VERBS_IP=<IPv4 of a local netdev>): the
// GIDs hold that address, the port's MTU is the netdev's less 80 B (as
// rxe's), and a QP whose destination GID is another IPv4 address speaks
// RoCEv2 RC on the netdev through an AF_PACKET socket, as Soft-RoCE would:
// SEND_ONLY_IMM frames with AckReq and ICRC, its UDP source port
// 0xC000 | QPN, go-back-N on a sequence NAK or the ACK timeout (retry_cnt,
// then the QP fails); as responder in PSN order, an ACK when the frame
// asks, the ACK again for a duplicate, one NAK per gap. That lets a real
// switch (the XDP engine in the netns topologies) be a VerbsSession's peer.
#include "fake_verbs_state.h"

#include <incxdp/transport.h>
#include <incxdp/util/iface.h>

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

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>

namespace fakeverbs {

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
                    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in *>(a->ifa_addr)->sin_addr, buf,
                              sizeof(buf)) &&
                    d.ip == buf)
                    d.ifname = a->ifa_name;
            freeifaddrs(all);
        }
        if (d.ifname.empty()) {
            std::fprintf(stderr, "fake0: no netdev holds INCXDP_FAKE_VERBS_IP %s\n", ip);
            std::abort();
        }
        d.ifindex = if_nametoindex(d.ifname.c_str());
        d.mtu = incxdp::util::iface_mtu(d.ifname).value_or(1500);
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

namespace {

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

} // namespace

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

int wire_connect(Qp *q, const ibv_qp_attr &a) {
    const ibv_global_route &g = a.ah_attr.grh;
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
    q->ep.src_port = uint16_t(0xC000 | (q->qp.qp_num & 0x3FFF));
    q->ep.dst_qpn = a.dest_qp_num;
    q->epsn = a.rq_psn;
    q->wire = true;
    if (W().pkt_fd < 0)
        W().start_net();
    return 0;
}

} // namespace fakeverbs
