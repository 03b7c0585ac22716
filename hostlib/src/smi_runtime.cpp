// SPDX-License-Identifier: BSD-2-Clause
// The SMI runtime's endpoint, frames, link layer and progress thread.
#include "smi_runtime.h"

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <span>
#include <stdexcept>

namespace incxdp::smi {
namespace {

static_assert(std::endian::native == std::endian::little,
              "SMI elements are little-endian on the wire and copied as they are");

constexpr size_t kRecvBatch = 64;
constexpr auto kMaxRto = std::chrono::milliseconds(500);
constexpr auto kFinishAckWait = std::chrono::seconds(10);
constexpr auto kFinishLinger = std::chrono::milliseconds(200);

incxdp_smi_msg link_ack(int src, int dst, uint32_t expected) {
    incxdp_smi_msg m{};
    std::memcpy(m.data, &expected, 4);
    m.data[4] = INCXDP_SMI_SYNCH_LINK_ACK;
    m.src = static_cast<uint8_t>(src);
    m.dst = static_cast<uint8_t>(dst);
    m.elems_and_op = incxdp_smi_pack(0, INCXDP_SMI_OP_SYNCH);
    return m;
}

// The relay header's session carries the frame's sequence number.
mesh::OutFrame out_frame(int dst, uint32_t seq, const std::vector<uint8_t> &payload) {
    mesh::OutFrame f;
    f.dst_node = static_cast<uint32_t>(dst);
    f.kind = INCXDP_RELAY_KIND_SMI;
    f.session = seq;
    f.body = payload.data();
    f.body_len = payload.size();
    return f;
}

// A frame the link does not take now (full socket buffer) is lost, as is one
// to an unreachable neighbour: the link layer's timer sends it again.
void send_frames(incxdp_smi_runtime &rt, std::span<const mesh::OutFrame> frames) {
    rt.link->send(frames);
}

// Under rt.mu: frames to dst, each with an ack for dst's stream in front and
// up to rt.max_msgs of the messages (none: one ack-only frame), in one send.
// Frames with messages are sequenced and kept until acked.
void send_msgs(incxdp_smi_runtime &rt, int dst, const incxdp_smi_msg *msgs, size_t n) {
    Peer &p = rt.peers[dst];
    if (!p.reachable)
        throw std::runtime_error(
            fmt::format("SMI rank {}: no route to rank {} in {}", rt.rank, dst, rt.cabling.source));
    const incxdp_smi_msg ack = link_ack(rt.rank, dst, p.rx_expected);
    p.ack_due = p.ack_now = false;
    p.frames_unacked = 0;
    const auto now = Clock::now();
    if (p.unacked.empty())
        p.backoff = 0;
    thread_local std::vector<uint8_t> ack_only;
    thread_local std::vector<mesh::OutFrame> out;
    out.clear();
    if (n == 0) {
        ack_only.assign(INCXDP_SMI_MSG_LEN, 0);
        std::memcpy(ack_only.data(), &ack, sizeof(ack));
        out.push_back(out_frame(dst, 0, ack_only));
    }
    for (size_t i = 0; i < n; i += rt.max_msgs) {
        const size_t k = std::min(rt.max_msgs, n - i);
        std::vector<uint8_t> b((k + 1) * INCXDP_SMI_MSG_LEN);
        std::memcpy(b.data(), &ack, sizeof(ack));
        std::memcpy(b.data() + INCXDP_SMI_MSG_LEN, msgs + i, k * INCXDP_SMI_MSG_LEN);
        const uint32_t seq = p.next_seq++;
        p.unacked.push_back({seq, std::move(b), now});
        out.push_back(out_frame(dst, seq, p.unacked.back().bytes));
    }
    send_frames(rt, out);
    rt.stats.frames_sent += out.size();
    rt.stats.msgs_sent += n;
    rt.stats.unacked_high_water = std::max<uint64_t>(rt.stats.unacked_high_water, p.unacked.size());
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

// Under rt.mu: a frame the link received for this rank (transit frames stay
// in the relays).
void on_frame(incxdp_smi_runtime &rt, const mesh::InFrame &f) {
    if (f.kind != INCXDP_RELAY_KIND_SMI || f.len % INCXDP_SMI_MSG_LEN ||
        f.src_node >= static_cast<uint32_t>(rt.size))
        return;
    const uint32_t src = f.src_node;
    rt.stats.frames_received++;
    const size_t n = f.len / INCXDP_SMI_MSG_LEN;
    // The frame's bytes may be unaligned (an AF_XDP frame): copied message
    // by message.
    auto msg = [&](size_t i) {
        incxdp_smi_msg m;
        std::memcpy(&m, f.data + i * INCXDP_SMI_MSG_LEN, sizeof m);
        return m;
    };
    Peer &p = rt.peers[src];
    for (size_t i = 0; i < n; i++) {
        const incxdp_smi_msg m = msg(i);
        if (incxdp_smi_op(m.elems_and_op) == INCXDP_SMI_OP_SYNCH &&
            m.data[4] == INCXDP_SMI_SYNCH_LINK_ACK) {
            uint32_t e;
            std::memcpy(&e, m.data, 4);
            on_ack(p, e);
        }
    }
    const uint32_t seq = f.session;
    if (seq == 0)
        return;
    // Also for duplicates and gaps: tells the sender where we are.
    if (!p.ack_due)
        p.ack_due_since = Clock::now();
    p.ack_due = true;
    p.frames_unacked++;
    if (seq != p.rx_expected) {
        p.ack_now = true;
        return;
    }
    for (size_t i = 0; i < n; i++)
        if (!fits(rt, msg(i)))
            return;
    for (size_t i = 0; i < n; i++)
        take(rt, msg(i));
    p.rx_expected++;
}

// Under rt.mu: go-back-N for every peer whose oldest frame is overdue.
void resend_overdue(incxdp_smi_runtime &rt) {
    const auto now = Clock::now();
    std::vector<mesh::OutFrame> out;
    for (Peer &p : rt.peers) {
        if (p.unacked.empty())
            continue;
        auto rto =
            std::min<std::chrono::milliseconds>(rt.rto * (1 << std::min(p.backoff, 5)), kMaxRto);
        if (now - p.unacked.front().sent < rto)
            continue;
        p.backoff++;
        const int dst = static_cast<int>(&p - rt.peers.data());
        out.clear();
        for (SentFrame &f : p.unacked) {
            // The ack in front is refreshed: the peer may have waited for it.
            incxdp_smi_msg ack = link_ack(rt.rank, dst, p.rx_expected);
            std::memcpy(f.bytes.data(), &ack, sizeof(ack));
            out.push_back(out_frame(dst, f.seq, f.bytes));
            f.sent = now;
            rt.stats.retransmits++;
        }
        send_frames(rt, out);
    }
}

// Sleeps in poll() on the link's sockets and receives what arrives; while an
// application thread receives itself (wait_for), on the wake eventfd only,
// looking again every millisecond (delayed acks, old batches, resends).
void progress_loop(incxdp_smi_runtime &rt) {
    std::vector<pollfd> pfds{{rt.wake, POLLIN, 0}};
    if (rt.link)
        for (int fd : rt.link->poll_fds())
            pfds.push_back({fd, POLLIN, 0});
    while (!rt.stop.load()) {
        const bool app = rt.app_polling.load() > 0;
        const int ready = ::poll(pfds.data(), app ? 1 : pfds.size(), 1);
        if (ready > 0 && (pfds[0].revents & POLLIN)) {
            uint64_t n;
            (void)!::read(rt.wake, &n, sizeof n);
        }
        if (app && rt.app_polling.load() > 0)
            continue;
        std::lock_guard<std::mutex> g(rt.mu);
        progress_once(rt);
    }
}

// A CK_R chain from any QSFP ends at the CK that delivers (at most one
// hand-over per other QSFP); -1 if it does not.
int ckr_owner(const std::vector<incxdp_smi_ckr_entry> &ckr, int port, unsigned kind) {
    int ch = 0;
    for (int step = 0; step <= kQsfps; step++) {
        const incxdp_smi_ckr_entry &e = ckr[incxdp_smi_ckr_key(ch, port, kind)];
        if (e.action == INCXDP_SMI_CKR_DELIVER)
            return e.ch;
        if (e.action != INCXDP_SMI_CKR_VIA || e.ch >= kQsfps)
            return -1;
        ch = e.ch;
    }
    return -1;
}

template <class T>
std::vector<T> read_array(const std::string &pin_dir, const char *name, size_t n) {
    const std::string path = pin_dir + "/" + name;
    const int fd = bpf_obj_get(path.c_str());
    if (fd < 0)
        throw std::runtime_error(
            fmt::format("cannot open {}: {} (install the tables: incxdp smi routes FILE --install)",
                        path, std::strerror(errno)));
    std::vector<T> out(n);
    for (uint32_t k = 0; k < n; k++)
        if (bpf_map_lookup_elem(fd, &k, &out[k]) != 0) {
            const int err = errno;
            ::close(fd);
            throw std::runtime_error(
                fmt::format("cannot read entry {} of {}: {}", k, path, std::strerror(err)));
        }
    ::close(fd);
    return out;
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

void wake_progress(incxdp_smi_runtime &rt) {
    const uint64_t one = 1;
    (void)!::write(rt.wake, &one, sizeof one);
}

void flush_peer(incxdp_smi_runtime &rt, int dst) {
    Peer &p = rt.peers[dst];
    send_msgs(rt, dst, p.batch.data(), p.batch.size());
    p.batch.clear();
}

void flush_all(incxdp_smi_runtime &rt) {
    for (size_t d = 0; d < rt.peers.size(); d++)
        if (!rt.peers[d].batch.empty())
            flush_peer(rt, static_cast<int>(d));
}

void queue_msg(incxdp_smi_runtime &rt, int dst, const incxdp_smi_msg &m, bool now) {
    if (dst == rt.rank) { // SMI's CK_S hands these to its own CK_R
        take(rt, m);
        rt.cv.notify_all();
        return;
    }
    Peer &p = rt.peers[dst];
    if (p.batch.empty())
        p.batch_since = Clock::now();
    p.batch.push_back(m);
    if (now || p.batch.size() >= rt.max_msgs * kFramesPerSend)
        flush_peer(rt, dst);
}

size_t progress_once(incxdp_smi_runtime &rt) {
    thread_local std::vector<mesh::InFrame> in(kRecvBatch);
    // Under rt.mu: the link is not thread-safe and application threads send.
    const size_t got = rt.link ? rt.link->recv(in) : 0;
    for (size_t i = 0; i < got; i++)
        on_frame(rt, in[i]);
    const auto now = Clock::now();
    for (size_t d = 0; d < rt.peers.size(); d++) {
        Peer &p = rt.peers[d];
        if (!p.batch.empty() && now - p.batch_since >= kBatchAge)
            flush_peer(rt, static_cast<int>(d));
        else if (p.ack_due && (p.ack_now || p.frames_unacked >= kAckEveryFrames ||
                               now - p.ack_due_since >= kAckDelay))
            send_msgs(rt, static_cast<int>(d), nullptr, 0);
    }
    resend_overdue(rt);
    if (got)
        rt.cv.notify_all();
    return got;
}

void read_ck_tables(incxdp_smi_runtime &rt, const std::string &pin_dir) {
    const auto cks = read_array<incxdp_smi_cks_entry>(pin_dir, INCXDP_MAP_SMI_CKS,
                                                      kQsfps * INCXDP_SMI_CKS_RANKS);
    const auto ckr = read_array<incxdp_smi_ckr_entry>(pin_dir, INCXDP_MAP_SMI_CKR,
                                                      kQsfps * INCXDP_SMI_PORTS * 2);
    if (cks[incxdp_smi_cks_key(0, rt.rank)].action != INCXDP_SMI_CKS_LOCAL)
        throw std::runtime_error(fmt::format("the CK_S in {} is not rank {}'s (install the tables "
                                             "of {}: incxdp smi routes --install)",
                                             pin_dir, rt.rank, rt.cabling.source));
    rt.hops.assign(rt.size, -1);
    for (int d = 0; d < rt.size; d++) {
        const incxdp_smi_cks_entry &e = cks[incxdp_smi_cks_key(0, d)];
        if (d != rt.rank && e.action != INCXDP_SMI_CKS_UNREACHABLE)
            rt.hops[d] = e.hops;
    }
    for (int port = 0; port < INCXDP_SMI_PORTS; port++)
        for (unsigned kind : {INCXDP_SMI_CKR_DATA, INCXDP_SMI_CKR_CONTROL})
            rt.port_owner[port][kind] = ckr_owner(ckr, port, kind);
}

void start(incxdp_smi_runtime &rt, int rank, const std::string &topology_file,
           const std::string &pin_dir, bool eager) {
    rt.cabling = topo::smi::load_cabling(topology_file);
    rt.size = rt.cabling.size();
    if (rank < 0 || rank >= rt.size)
        throw std::runtime_error(fmt::format("rank {} is not in 0..{} ({} has {} FPGAs)", rank,
                                             rt.size - 1, topology_file, rt.size));
    rt.rank = rank;
    rt.eager_default = eager;
    rt.routes = compute_routes(rt.cabling);
    rt.peers.resize(rt.size);
    if (const char *ms = std::getenv("INCXDP_SMI_RTO_MS"))
        rt.rto = std::chrono::milliseconds(std::max(1, std::atoi(ms)));
    if (const char *us = std::getenv("INCXDP_SMI_BUSY_POLL_US"))
        rt.busy_poll = std::chrono::microseconds(std::max(0, std::atoi(us)));
    // An uncabled rank has no relay (nor tables) to open; it can only fail
    // to reach others.
    const bool cabled = std::any_of(rt.cabling.cable_at[rank].begin(),
                                    rt.cabling.cable_at[rank].end(), [](int c) { return c >= 0; });
    rt.hops.assign(rt.size, -1);
    for (auto &o : rt.port_owner)
        o = {-1, -1};
    if (cabled) {
        try {
            read_ck_tables(rt, pin_dir);
            for (int d = 0; d < rt.size; d++)
                rt.peers[d].reachable = rt.hops[d] > 0;
            // INCXDP_SMI_AF_XDP=0: the UDP socket only (to compare the paths).
            const char *x = std::getenv("INCXDP_SMI_AF_XDP");
            if (x && std::strcmp(x, "0") == 0)
                rt.link = mesh::open_udp_link(pin_dir, static_cast<uint32_t>(rank));
            else
                rt.link = mesh::open_xdp_link(pin_dir, static_cast<uint32_t>(rank),
                                              fmt::format("SMI rank {}", rank));
        } catch (const std::exception &e) {
            throw std::runtime_error(fmt::format("SMI rank {}: {}", rank, e.what()));
        }
    }
    // `incxdp smi run`'s start barrier: this rank's sockets are bound; its
    // peers send once every rank's are.
    if (const char *w = std::getenv("INCXDP_SMI_READY_FD")) {
        const int fd = std::atoi(w);
        const char one = 1;
        (void)!::write(fd, &one, 1);
        ::close(fd);
        unsetenv("INCXDP_SMI_READY_FD");
    }
    if (const char *r = std::getenv("INCXDP_SMI_GO_FD")) {
        const int fd = std::atoi(r);
        char b;
        for (;;) {
            const ssize_t n = ::read(fd, &b, 1);
            if (n > 0 || (n < 0 && errno == EINTR))
                continue;
            break; // EOF: every rank is ready (or the launcher is gone)
        }
        ::close(fd);
        unsetenv("INCXDP_SMI_GO_FD");
    }
    if (const char *v = std::getenv("INCXDP_SMI_VERBOSE"); v && *v == '1' && rt.link)
        std::fprintf(stderr, "SMI rank %d: delivery %s\n", rank, rt.link->delivery().c_str());
    rt.wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (rt.wake < 0)
        throw std::runtime_error(
            fmt::format("SMI rank {}: eventfd: {}", rank, std::strerror(errno)));
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
    rt.link.reset();
    if (rt.wake >= 0)
        ::close(rt.wake);
    rt.wake = -1;
}

} // namespace incxdp::smi
