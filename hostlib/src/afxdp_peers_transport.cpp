// SPDX-License-Identifier: BSD-2-Clause
// The AF_XDP transport for several peers (transport.h): a socket on every rx
// queue of several interfaces, steered to by the interfaces' own XDP
// program (the caller's: the mesh relay), and whole frames sent, each out
// of its own interface, through the tx ring of the interface's queue 0
// socket (xsk_ring_tx.h) or as live frames through that program
// (xsk_live_tx.h): the one-peer transport's two senders. docs/SMI.md §9,
// docs/PERF.md.
#include <incxdp/netdev_xdp.h>
#include <incxdp/transport.h>
#include <incxdp/util/fd.h>
#include <incxdp/util/iface.h>
#include <incxdp/xdp_prog_maps.h>
#include <incxdp/xsk.h>

#include "xsk_live_tx.h"
#include "xsk_queue_socket.h"
#include "xsk_ring_tx.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <linux/ethtool.h>
#include <linux/if_link.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace incxdp {
namespace {

using detail::LiveTx;
using detail::RingTx;
using detail::XskQueueConfig;
using detail::XskQueueSocket;

// rx queues of an interface of this namespace (ethtool: sysfs shows the
// namespace it was mounted in), at least 1.
uint32_t rx_queues(const std::string &ifname) {
    util::Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (!fd)
        return 1;
    ethtool_channels ch{};
    ch.cmd = ETHTOOL_GCHANNELS;
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname.c_str());
    ifr.ifr_data = reinterpret_cast<char *>(&ch);
    if (ioctl(fd.get(), SIOCETHTOOL, &ifr) != 0)
        return 1;
    return std::max<uint32_t>(1, std::max(ch.rx_count, ch.combined_count));
}

// Which sender a send_frames() call takes (INCXDP_XSK_TX).
enum class TxWay { Ring, Live, Auto };

// Auto: calls of at most this many frames go through the tx ring, larger
// ones as live frames. A live-frame run has a fixed cost (the kernel sets up
// and tears down a page_pool per BPF_PROG_RUN) and then costs less per frame
// than the ring's skb each; the two cross near 20 frames (docs/PERF.md).
constexpr size_t kRingAtMost = 16;

TxWay tx_way(const std::string &describe) {
    const char *e = std::getenv("INCXDP_XSK_TX");
    const std::string v = e ? e : "";
    if (v.empty() || v == "auto")
        return TxWay::Auto;
    if (v == "ring")
        return TxWay::Ring;
    if (v == "live")
        return TxWay::Live;
    throw std::invalid_argument(
        fmt::format("{}: INCXDP_XSK_TX={}: want ring, live or auto", describe, v));
}

uint32_t iface_mtu(const std::string &ifname) {
    return util::iface_mtu(ifname).value_or(1500);
}

class AfXdpPeersTransport final : public Transport {
  public:
    explicit AfXdpPeersTransport(const AfXdpPeersConfig &cfg) : cfg_(cfg) {
        describe_ = fmt::format("{}afxdp on {}", cfg.describe.empty() ? "" : cfg.describe + ": ",
                                fmt::join(cfg.ifnames, ","));
        if (cfg.ifnames.empty())
            throw std::invalid_argument(describe_ + ": no interface");
        way_ = tx_way(describe_);
        for (size_t i = 0; i < cfg.ifnames.size(); i++)
            bind_iface(i);
        for (const auto &s : socks_)
            polls_.push_back({s->fd(), POLLIN, 0});
        if (cfg.tx_live_frames)
            setup_live();
        choose_tx();
    }

    size_t send_batch(std::span<const std::span<const std::byte>>) override {
        throw std::logic_error(describe_ + ": several peers: send whole frames (send_frames)");
    }

    size_t send_frames(std::span<const FrameOut> frames) override {
        if (!max_frame_)
            throw std::logic_error(describe_ + ": cannot send (no tx ring, no live frames here)");
        const size_t n = std::min(frames.size(), std::max<size_t>(cfg_.batch, 1));
        for (size_t i = 0; i < n; i++)
            if (frames[i].frame.size() > max_frame_)
                throw std::invalid_argument(fmt::format("{}: a {} B frame (at most {} B)",
                                                        describe_, frames[i].frame.size(),
                                                        max_frame_));
        return use_live(n) ? send_live(frames.first(n)) : send_ring(frames.first(n));
    }

    size_t max_frame() const override { return max_frame_; }

    size_t recv_views(std::span<std::span<const std::byte>> out, size_t) override {
        release_rx();
        const size_t want = std::min(out.size(), cfg_.batch);
        frames_.clear();
        // Every socket, starting one further each time: none starves.
        for (size_t i = 0; i < socks_.size() && frames_.size() < want; ++i) {
            XskQueueSocket &s = *socks_[(next_sock_ + i) % socks_.size()];
            const size_t before = frames_.size();
            s.peek(want - before, frames_);
            if (frames_.size() > before)
                held_.push_back(&s);
        }
        next_sock_ = (next_sock_ + 1) % socks_.size();
        std::copy(frames_.begin(), frames_.end(), out.begin());
        return frames_.size();
    }

    size_t recv_batch(std::span<const std::span<std::byte>> bufs,
                      std::span<size_t> sizes) override {
        return recv_batch_from_views(bufs, sizes);
    }

    void wait(std::chrono::nanoseconds timeout, bool want_send) override {
        release_rx(); // or the kernel may run out of fill-ring frames while we sleep
        for (const Ring &r : rings_)
            polls_[r.poll].events = short(POLLIN | (want_send && ring_used_ ? POLLOUT : 0));
        auto ns = std::max<int64_t>(timeout.count(), 0);
        timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
        if (::ppoll(polls_.data(), polls_.size(), &ts, nullptr) < 0 && errno != EINTR)
            throw std::system_error(errno, std::generic_category(), describe_ + ": ppoll");
        if (want_send && ring_used_)
            for (const Ring &r : rings_)
                r.tx->kick();
    }

    std::vector<int> poll_fds() const override {
        std::vector<int> fds;
        for (const auto &s : socks_)
            fds.push_back(s->fd());
        return fds;
    }

    std::string describe() const override { return describe_; }

    uint64_t rx_dropped() const override {
        uint64_t n = 0;
        for (const auto &s : socks_)
            n += s->dropped();
        return n;
    }

  private:
    // Sockets on the interface's rx queues (at most queue_stride), each in
    // the program's XSKMAP under i * queue_stride + queue.
    void bind_iface(size_t i) {
        const std::string &name = cfg_.ifnames[i];
        const uint32_t nq = std::min(rx_queues(name), cfg_.queue_stride);
        for (uint32_t q = 0; q < nq; q++) {
            XskQueueConfig c;
            c.ifname = name;
            c.queue = q;
            c.frame_size = cfg_.frame_size;
            c.rx_frames = cfg_.rx_frames;
            c.tx_frames = q == 0 ? cfg_.tx_frames : 0;
            c.batch = cfg_.batch;
            c.describe = describe_ + " on " + name;
            auto sock = std::make_unique<XskQueueSocket>(c);
            const uint32_t key = uint32_t(i) * cfg_.queue_stride + q;
            const int fd = sock->fd();
            if (bpf_map_update_elem(cfg_.xskmap_fd, &key, &fd, BPF_ANY) != 0)
                throw std::system_error(
                    errno, std::generic_category(),
                    fmt::format("{}: put the socket of {} queue {} into the XSKMAP", describe_,
                                name, q));
            if (q == 0 && cfg_.tx_frames) {
                const unsigned ifx = if_nametoindex(name.c_str());
                if (!ifx)
                    throw std::system_error(errno, std::generic_category(),
                                            fmt::format("{}: interface {}", describe_, name));
                rings_.push_back({ifx, socks_.size(), std::make_unique<RingTx>(*sock)});
                ring_max_ =
                    std::max<size_t>(ring_max_, std::min<size_t>(iface_mtu(name) + 14,
                                                                 rings_.back().tx->frame_bytes()));
            }
            socks_.push_back(std::move(sock));
        }
    }

    // The way out per call (way_), from what this host has; max_frame_: a
    // frame every way in use takes.
    void choose_tx() {
        std::string how;
        if (rings_.empty() || (live_ && way_ == TxWay::Live)) {
            way_ = TxWay::Live;
            max_frame_ = live_ ? live_max_ : 0;
            how = live_ ? "live frames" : "no tx";
        } else if (!live_ || way_ == TxWay::Ring) {
            how = way_ == TxWay::Live ? "tx ring: no live frames here" : "tx ring";
            way_ = TxWay::Ring;
            max_frame_ = ring_max_;
        } else {
            max_frame_ = std::min(ring_max_, live_max_);
            how = fmt::format("tx ring up to {} frames, else live frames", kRingAtMost);
        }
        ring_used_ = way_ != TxWay::Live;
        describe_ +=
            fmt::format(" ({}, {})", socks_.front()->zero_copy() ? "zero-copy" : "copy", how);
    }

    bool use_live(size_t n) {
        if (way_ != TxWay::Auto)
            return way_ == TxWay::Live;
        if (n <= kRingAtMost)
            return false;
        // Live frames would pass frames still waiting in a tx ring.
        for (const Ring &r : rings_)
            if (r.tx->pending()) {
                r.tx->kick();
                if (r.tx->pending())
                    return false;
            }
        return true;
    }

    size_t send_live(std::span<const FrameOut> frames) {
        const size_t n = live_->capacity(frames.size());
        for (size_t i = 0; i < n; i++) {
            std::memcpy(live_->data(i), frames[i].frame.data(), frames[i].frame.size());
            live_->set(i, uint32_t(frames[i].frame.size()), frames[i].ifindex);
        }
        return live_->run(n) == 0 ? n : 0;
    }

    // Runs of frames for one interface, each through that interface's ring,
    // in order; stops at the first that is full.
    size_t send_ring(std::span<const FrameOut> frames) {
        size_t done = 0;
        while (done < frames.size()) {
            const uint32_t ifx = frames[done].ifindex;
            size_t end = done + 1;
            while (end < frames.size() && frames[end].ifindex == ifx)
                end++;
            RingTx &tx = ring_of(ifx);
            const size_t k = tx.reserve(end - done);
            for (size_t i = 0; i < k; i++) {
                const auto f = frames[done + i].frame;
                std::memcpy(tx.data(i), f.data(), f.size());
                tx.set(i, uint32_t(f.size()));
            }
            tx.submit();
            if (done + k < end)
                return done + k;
            done = end;
        }
        return done;
    }

    RingTx &ring_of(uint32_t ifindex) {
        for (const Ring &r : rings_)
            if (r.ifindex == ifindex)
                return *r.tx;
        throw std::invalid_argument(fmt::format(
            "{}: a frame for interface {}, not one of this transport's", describe_, ifindex));
    }

    // Live frames through the program on the first interface, if every
    // interface can transmit XDP frames (veth: while its peer runs a native
    // XDP program) and the program holds incxdp_tx_frames; else none (the
    // tx rings send, whose skbs take the peer's normal rx path).
    void setup_live() {
        for (const std::string &name : cfg_.ifnames) {
            const unsigned ifx = if_nametoindex(name.c_str());
            auto feat = netdev::xdp_features(int(ifx));
            if (!ifx || (feat && !(*feat & netdev::kXdpActNdoXmit)))
                return;
            mtu_ = std::max(mtu_, iface_mtu(name));
        }
        const int ifx = int(if_nametoindex(cfg_.ifnames.front().c_str()));
        // The kernel keeps BPF_OBJ_NAME_LEN - 1 characters of a map's name.
        const std::string name = std::string(INCXDP_XSK_TX_MAP).substr(0, BPF_OBJ_NAME_LEN - 1);
        map_.reset(xdpmaps::map_fd_on_iface(ifx, name.c_str(), BPF_MAP_TYPE_ARRAY));
        if (!map_)
            return;
        // The program attached to the interface runs: with libxdp's
        // dispatcher that is the dispatcher (its components cannot be run
        // alone), which calls the one holding the map.
        bpf_xdp_query_opts q{};
        q.sz = sizeof(q);
        if (int err = bpf_xdp_query(ifx, 0, &q))
            throw std::system_error(-err, std::generic_category(),
                                    describe_ + ": query the XDP program of " +
                                        cfg_.ifnames.front());
        const uint32_t prog_id = q.drv_prog_id ? q.drv_prog_id : q.skb_prog_id;
        prog_.reset(bpf_prog_get_fd_by_id(prog_id));
        if (!prog_)
            throw std::system_error(errno, std::generic_category(),
                                    fmt::format("{}: fd of XDP program {}", describe_, prog_id));
        auto live = std::make_unique<LiveTx>(prog_.get(), map_.get(), describe_);
        // The longest frame an interface carries, if a live frame holds it.
        size_t want = std::min<size_t>(mtu_ + 14, live->slot_bytes());
        int err;
        while ((err = live->try_probe(want)) == -EINVAL && want > 1514 + 64)
            want -= 64;
        if (err == -EINVAL)
            return;
        if (err)
            throw std::system_error(
                -err, std::generic_category(),
                fmt::format("{}: BPF_PROG_RUN live frames of {} B", describe_, want));
        live_max_ = want;
        live_ = std::move(live);
    }

    void release_rx() {
        for (XskQueueSocket *s : held_)
            s->release();
        held_.clear();
    }

    AfXdpPeersConfig cfg_;
    std::string describe_;
    std::vector<std::unique_ptr<XskQueueSocket>> socks_;
    struct Ring {
        uint32_t ifindex;
        size_t poll; ///< its socket's entry in polls_
        std::unique_ptr<RingTx> tx;
    };
    std::vector<Ring>
        rings_; ///< one per interface, on its queue 0 socket (after socks_: borrows it)
    std::vector<pollfd> polls_;
    std::vector<XskQueueSocket *> held_; ///< sockets whose frames the last receive handed out
    size_t next_sock_ = 0;
    std::vector<std::span<const std::byte>> frames_;
    util::Fd prog_, map_;
    std::unique_ptr<LiveTx> live_;
    uint32_t mtu_ = 0;
    TxWay way_ = TxWay::Auto;
    bool ring_used_ = false;
    size_t ring_max_ = 0, live_max_ = 0, max_frame_ = 0;
};

} // namespace

std::unique_ptr<Transport> make_afxdp_peers_transport(const AfXdpPeersConfig &cfg) {
    return std::make_unique<AfXdpPeersTransport>(cfg);
}

} // namespace incxdp
