// SPDX-License-Identifier: BSD-2-Clause
// The SMI runtime's endpoint, frames, link layer and progress thread.
#include "smi_runtime.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace incxdp::smi {
namespace {

static_assert(std::endian::native == std::endian::little,
              "SMI elements are little-endian on the wire and copied as they are");

constexpr int kRecvBatch = 64;
constexpr size_t kFrameMax =
    sizeof(incxdp_relay_hdr) + INCXDP_SMI_MAX_MSGS_PER_FRAME * INCXDP_SMI_MSG_LEN;
constexpr auto kMaxRto = std::chrono::milliseconds(500);
constexpr auto kFinishAckWait = std::chrono::seconds(10);
constexpr auto kFinishLinger = std::chrono::milliseconds(200);

[[noreturn]] void sys_fail(const std::string &what) {
    throw std::runtime_error(fmt::format("{}: {}", what, std::strerror(errno)));
}

incxdp_smi_msg link_ack(int src, int dst, uint32_t expected) {
    incxdp_smi_msg m{};
    std::memcpy(m.data, &expected, 4);
    m.data[4] = INCXDP_SMI_SYNCH_LINK_ACK;
    m.src = static_cast<uint8_t>(src);
    m.dst = static_cast<uint8_t>(dst);
    m.elems_and_op = incxdp_smi_pack(0, INCXDP_SMI_OP_SYNCH);
    return m;
}

void send_bytes(incxdp_smi_runtime &rt, const Peer &p, const std::vector<uint8_t> &b) {
    // A full socket buffer or an unreachable neighbour loses the frame; the
    // link layer's timer sends it again.
    ::sendto(rt.fd, b.data(), b.size(), MSG_DONTWAIT,
             reinterpret_cast<const sockaddr *>(&p.next_hop), sizeof(p.next_hop));
}

// Under rt.mu: one frame to dst with an ack for dst's stream in front and
// the given messages; sequenced (and kept until acked) if it carries any.
void send_frame(incxdp_smi_runtime &rt, int dst, const incxdp_smi_msg *msgs, size_t n) {
    Peer &p = rt.peers[dst];
    if (!p.reachable)
        throw std::runtime_error(
            fmt::format("SMI rank {}: no route to rank {} in {}", rt.rank, dst, rt.cabling.source));
    std::vector<uint8_t> b(sizeof(incxdp_relay_hdr) + (n + 1) * INCXDP_SMI_MSG_LEN);
    incxdp_relay_hdr h{};
    h.magic = htons(INCXDP_RELAY_MAGIC);
    h.version = INCXDP_RELAY_VERSION;
    h.kind = INCXDP_RELAY_KIND_SMI;
    h.total_hops = static_cast<uint8_t>(std::max(0, rt.routes.ranks[rt.rank].hops[dst]));
    h.src_node = htonl(static_cast<uint32_t>(rt.rank));
    h.dst_node = htonl(static_cast<uint32_t>(dst));
    const uint32_t seq = n ? p.next_seq++ : 0;
    h.session = htonl(seq);
    h.payload_len = htonl(static_cast<uint32_t>((n + 1) * INCXDP_SMI_MSG_LEN));
    std::memcpy(b.data(), &h, sizeof(h));
    incxdp_smi_msg ack = link_ack(rt.rank, dst, p.rx_expected);
    std::memcpy(b.data() + sizeof(h), &ack, sizeof(ack));
    if (n)
        std::memcpy(b.data() + sizeof(h) + INCXDP_SMI_MSG_LEN, msgs, n * INCXDP_SMI_MSG_LEN);
    p.ack_due = false;
    send_bytes(rt, p, b);
    rt.stats.frames_sent++;
    rt.stats.msgs_sent += n;
    if (n) {
        if (p.unacked.empty())
            p.backoff = 0;
        p.unacked.push_back({seq, std::move(b), Clock::now()});
        rt.stats.unacked_high_water =
            std::max<uint64_t>(rt.stats.unacked_high_water, p.unacked.size());
    }
}

// Under rt.mu: a data or credit message from a frame accepted in order.
// Whether a stream can take it: an eager sender's stream that is full
// refuses the frame whole, and the sender's timer sends it again.
bool fits(incxdp_smi_runtime &rt, const incxdp_smi_msg &m) {
    if (incxdp_smi_op(m.elems_and_op) == INCXDP_SMI_OP_SYNCH)
        return true;
    auto it = rt.rx.find(stream_key(m.src, m.port, incxdp_smi_op(m.elems_and_op)));
    return it == rt.rx.end() || it->second.msgs.size() < kStreamCapMsgs;
}

void take(incxdp_smi_runtime &rt, const incxdp_smi_msg &m) {
    const int op = static_cast<int>(incxdp_smi_op(m.elems_and_op));
    if (op == INCXDP_SMI_OP_SYNCH) {
        if (m.data[4] == INCXDP_SMI_SYNCH_LINK_ACK)
            return; // handled for every frame
        uint32_t credits;
        std::memcpy(&credits, m.data, 4);
        rt.tx[stream_key(m.src, m.port, m.data[4])].credits += credits;
        return;
    }
    rt.rx[stream_key(m.src, m.port, op)].msgs.push_back(m);
    rt.rx_msgs++;
    rt.stats.msgs_received++;
    rt.stats.rx_high_water =
        std::max<uint64_t>(rt.stats.rx_high_water, rt.rx_msgs * INCXDP_SMI_MSG_LEN);
}

void on_ack(Peer &p, uint32_t expected) {
    bool moved = false;
    while (!p.unacked.empty() && p.unacked.front().seq < expected) {
        p.unacked.pop_front();
        moved = true;
    }
    if (moved)
        p.backoff = 0;
}

// Under rt.mu: a transit frame (no relay on this node): on to its next hop.
void forward(incxdp_smi_runtime &rt, uint8_t *frame, size_t len, int dst) {
    if (dst >= rt.size || !rt.peers[dst].reachable)
        return;
    auto *h = reinterpret_cast<incxdp_relay_hdr *>(frame);
    if (h->hops >= INCXDP_SMI_MAX_RANKS - 1)
        return;
    h->hops++;
    ::sendto(rt.fd, frame, len, MSG_DONTWAIT,
             reinterpret_cast<const sockaddr *>(&rt.peers[dst].next_hop), sizeof(sockaddr_in));
    rt.stats.forwarded++;
}

void on_frame(incxdp_smi_runtime &rt, uint8_t *frame, size_t len) {
    if (len < sizeof(incxdp_relay_hdr))
        return;
    incxdp_relay_hdr h;
    std::memcpy(&h, frame, sizeof(h));
    const size_t payload = ntohl(h.payload_len);
    if (ntohs(h.magic) != INCXDP_RELAY_MAGIC || h.version != INCXDP_RELAY_VERSION ||
        h.kind != INCXDP_RELAY_KIND_SMI || payload % INCXDP_SMI_MSG_LEN ||
        sizeof(h) + payload > len)
        return;
    const uint32_t src = ntohl(h.src_node), dst = ntohl(h.dst_node);
    if (src >= static_cast<uint32_t>(rt.size))
        return;
    if (dst != static_cast<uint32_t>(rt.rank)) {
        forward(rt, frame, sizeof(h) + payload, static_cast<int>(dst));
        return;
    }
    rt.stats.frames_received++;
    const size_t n = payload / INCXDP_SMI_MSG_LEN;
    std::vector<incxdp_smi_msg> msgs(n);
    std::memcpy(msgs.data(), frame + sizeof(h), payload);
    Peer &p = rt.peers[src];
    for (const incxdp_smi_msg &m : msgs)
        if (incxdp_smi_op(m.elems_and_op) == INCXDP_SMI_OP_SYNCH &&
            m.data[4] == INCXDP_SMI_SYNCH_LINK_ACK) {
            uint32_t e;
            std::memcpy(&e, m.data, 4);
            on_ack(p, e);
        }
    const uint32_t seq = ntohl(h.session);
    if (seq == 0)
        return;
    p.ack_due = true; // also for duplicates and gaps: tells the sender where we are
    if (seq != p.rx_expected)
        return;
    for (const incxdp_smi_msg &m : msgs)
        if (!fits(rt, m))
            return;
    for (const incxdp_smi_msg &m : msgs)
        take(rt, m);
    p.rx_expected++;
}

// Under rt.mu: go-back-N for every peer whose oldest frame is overdue.
void resend_overdue(incxdp_smi_runtime &rt) {
    const auto now = Clock::now();
    for (Peer &p : rt.peers) {
        if (p.unacked.empty())
            continue;
        auto rto =
            std::min<std::chrono::milliseconds>(rt.rto * (1 << std::min(p.backoff, 5)), kMaxRto);
        if (now - p.unacked.front().sent < rto)
            continue;
        p.backoff++;
        for (SentFrame &f : p.unacked) {
            // The ack in front is refreshed: the peer may have waited for it.
            incxdp_smi_msg ack =
                link_ack(rt.rank, static_cast<int>(&p - rt.peers.data()), p.rx_expected);
            std::memcpy(f.bytes.data() + sizeof(incxdp_relay_hdr), &ack, sizeof(ack));
            send_bytes(rt, p, f.bytes);
            f.sent = now;
            rt.stats.retransmits++;
        }
    }
}

void progress_loop(incxdp_smi_runtime &rt) {
    std::vector<std::vector<uint8_t>> bufs(kRecvBatch, std::vector<uint8_t>(kFrameMax + 64));
    std::vector<mmsghdr> hdrs(kRecvBatch);
    std::vector<iovec> iovs(kRecvBatch);
    while (!rt.stop.load()) {
        pollfd pfd{rt.fd, POLLIN, 0};
        ::poll(&pfd, 1, 1);
        for (int i = 0; i < kRecvBatch; i++) {
            iovs[i] = {bufs[i].data(), bufs[i].size()};
            hdrs[i] = {};
            hdrs[i].msg_hdr.msg_iov = &iovs[i];
            hdrs[i].msg_hdr.msg_iovlen = 1;
        }
        int got = ::recvmmsg(rt.fd, hdrs.data(), kRecvBatch, MSG_DONTWAIT, nullptr);
        std::lock_guard<std::mutex> g(rt.mu);
        for (int i = 0; i < got; i++)
            on_frame(rt, bufs[i].data(), hdrs[i].msg_len);
        for (size_t d = 0; d < rt.peers.size(); d++) {
            Peer &p = rt.peers[d];
            if (!p.batch.empty())
                flush_peer(rt, static_cast<int>(d));
            else if (p.ack_due)
                send_frame(rt, static_cast<int>(d), nullptr, 0);
        }
        resend_overdue(rt);
        rt.cv.notify_all();
    }
}

} // namespace

int elem_size(SMI_Datatype t) {
    switch (t) {
    case SMI_CHAR:
        return 1;
    case SMI_SHORT:
        return 2;
    case SMI_INT:
    case SMI_FLOAT:
        return 4;
    case SMI_DOUBLE:
        return 8;
    }
    return 0;
}

int elems_per_msg(SMI_Datatype t) {
    switch (t) {
    case SMI_CHAR:
        return INCXDP_SMI_ELEMS_CHAR;
    case SMI_SHORT:
        return INCXDP_SMI_ELEMS_SHORT;
    case SMI_INT:
        return INCXDP_SMI_ELEMS_INT;
    case SMI_FLOAT:
        return INCXDP_SMI_ELEMS_FLOAT;
    case SMI_DOUBLE:
        return INCXDP_SMI_ELEMS_DOUBLE;
    }
    return 0;
}

void flush_peer(incxdp_smi_runtime &rt, int dst) {
    Peer &p = rt.peers[dst];
    for (size_t i = 0; i < p.batch.size(); i += rt.max_msgs)
        send_frame(rt, dst, p.batch.data() + i, std::min(rt.max_msgs, p.batch.size() - i));
    p.batch.clear();
}

void flush_all(incxdp_smi_runtime &rt) {
    for (size_t d = 0; d < rt.peers.size(); d++)
        if (!rt.peers[d].batch.empty())
            flush_peer(rt, static_cast<int>(d));
}

void queue_msg(incxdp_smi_runtime &rt, int dst, const incxdp_smi_msg &m, bool now) {
    Peer &p = rt.peers[dst];
    p.batch.push_back(m);
    if (now || p.batch.size() >= rt.max_msgs)
        flush_peer(rt, dst);
}

void start(incxdp_smi_runtime &rt, int rank, const std::string &topology_file, bool eager) {
    rt.cabling = topo::smi::load_cabling(topology_file);
    rt.size = rt.cabling.size();
    if (rank < 0 || rank >= rt.size)
        throw std::runtime_error(fmt::format("rank {} is not in 0..{} ({} has {} FPGAs)", rank,
                                             rt.size - 1, topology_file, rt.size));
    rt.rank = rank;
    rt.eager_default = eager;
    rt.routes = compute_routes(rt.cabling);
    rt.peers.resize(rt.size);
    for (int d = 0; d < rt.size; d++) {
        int ch = rt.routes.ranks[rank].out_ch[d];
        if (ch < 0)
            continue;
        topo::smi::LinkEnd e = topo::smi::link_end(rt.cabling, rank, ch);
        Peer &p = rt.peers[d];
        p.next_hop.sin_family = AF_INET;
        p.next_hop.sin_port = htons(INCXDP_RELAY_UDP_PORT);
        if (inet_pton(AF_INET, e.peer_ip.c_str(), &p.next_hop.sin_addr) != 1)
            throw std::runtime_error("bad address " + e.peer_ip);
        p.reachable = true;
    }
    if (const char *ms = std::getenv("INCXDP_SMI_RTO_MS"))
        rt.rto = std::chrono::milliseconds(std::max(1, std::atoi(ms)));
    rt.fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (rt.fd < 0)
        sys_fail("SMI endpoint: socket");
    int one = 1, big = 8 << 20;
    ::setsockopt(rt.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // FORCE needs CAP_NET_ADMIN (the launcher runs as root); else the sysctl cap.
    if (::setsockopt(rt.fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) != 0)
        ::setsockopt(rt.fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    if (::setsockopt(rt.fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)) != 0)
        ::setsockopt(rt.fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(INCXDP_RELAY_UDP_PORT);
    if (::bind(rt.fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) != 0)
        sys_fail(fmt::format("SMI endpoint: bind UDP port {} (another SMI rank in this namespace?)",
                             INCXDP_RELAY_UDP_PORT));
    rt.progress = std::thread([&rt] {
        try {
            progress_loop(rt);
        } catch (const std::exception &e) {
            std::fprintf(stderr, "SMI rank %d: progress thread: %s\n", rt.rank, e.what());
            std::_Exit(1);
        }
    });
}

void finish(incxdp_smi_runtime &rt) {
    {
        std::unique_lock<std::mutex> lk(rt.mu);
        flush_all(rt);
        auto all_acked = [&] {
            return std::all_of(rt.peers.begin(), rt.peers.end(),
                               [](const Peer &p) { return p.unacked.empty(); });
        };
        if (!rt.cv.wait_for(lk, kFinishAckWait, all_acked))
            std::fprintf(stderr,
                         "SMI rank %d: finalize: frames still unacknowledged after %lld s\n",
                         rt.rank, static_cast<long long>(kFinishAckWait.count()));
    }
    // Peers whose last acks were lost resend: answer them a little longer.
    std::this_thread::sleep_for(kFinishLinger);
    rt.stop = true;
    if (rt.progress.joinable())
        rt.progress.join();
    ::close(rt.fd);
    rt.fd = -1;
}

} // namespace incxdp::smi
