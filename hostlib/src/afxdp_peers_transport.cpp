// SPDX-License-Identifier: BSD-2-Clause
// The AF_XDP transport for several peers (transport.h): a socket on every rx
// queue of several interfaces, steered to by the interfaces' own XDP
// program (the caller's: the mesh relay), and whole frames sent, each out
// of its own interface, as live frames through that program (xsk_live_tx.h,
// the same sender as the one-peer transport's). docs/SMI.md §9.
#include <incxdp/netdev_xdp.h>
#include <incxdp/transport.h>
#include <incxdp/util/fd.h>
#include <incxdp/xdp_prog_maps.h>
#include <incxdp/xsk.h>

#include "xsk_live_tx.h"
#include "xsk_queue_socket.h"

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
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace incxdp {
namespace {

using detail::LiveTx;
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

uint32_t iface_mtu(const std::string &ifname) {
    util::Fd fd(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    ifreq r{};
    std::snprintf(r.ifr_name, IFNAMSIZ, "%s", ifname.c_str());
    if (!fd || ioctl(fd.get(), SIOCGIFMTU, &r) != 0)
        return 1500;
    return uint32_t(r.ifr_mtu);
}

class AfXdpPeersTransport final : public Transport {
  public:
    explicit AfXdpPeersTransport(const AfXdpPeersConfig &cfg) : cfg_(cfg) {
        describe_ = fmt::format("{}afxdp on {}", cfg.describe.empty() ? "" : cfg.describe + ": ",
                                fmt::join(cfg.ifnames, ","));
        if (cfg.ifnames.empty())
            throw std::invalid_argument(describe_ + ": no interface");
        for (size_t i = 0; i < cfg.ifnames.size(); i++)
            bind_iface(i);
        for (const auto &s : socks_)
            polls_.push_back({s->fd(), POLLIN, 0});
        if (cfg.tx_live_frames)
            setup_live();
        describe_ += fmt::format(" ({}{})", socks_.front()->zero_copy() ? "zero-copy" : "copy",
                                 live_ ? ", live frames" : "");
    }

    size_t send_batch(std::span<const std::span<const std::byte>>) override {
        throw std::logic_error(describe_ + ": several peers: send whole frames (send_frames)");
    }

    size_t send_frames(std::span<const FrameOut> frames) override {
        if (!live_)
            throw std::logic_error(describe_ + ": cannot send (no live frames here)");
        const size_t n = live_->capacity(std::min(frames.size(), std::max<size_t>(cfg_.batch, 1)));
        for (size_t i = 0; i < n; i++) {
            const FrameOut &f = frames[i];
            if (f.frame.size() > max_frame_)
                throw std::invalid_argument(fmt::format("{}: a {} B frame (at most {} B)",
                                                        describe_, f.frame.size(), max_frame_));
            std::memcpy(live_->data(i), f.frame.data(), f.frame.size());
            live_->set(i, uint32_t(f.frame.size()), f.ifindex);
        }
        return live_->run(n) == 0 ? n : 0;
    }

    size_t max_frame() const override { return live_ ? max_frame_ : 0; }

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

    void wait(std::chrono::nanoseconds timeout, bool) override {
        release_rx(); // or the kernel may run out of fill-ring frames while we sleep
        auto ns = std::max<int64_t>(timeout.count(), 0);
        timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
        if (::ppoll(polls_.data(), polls_.size(), &ts, nullptr) < 0 && errno != EINTR)
            throw std::system_error(errno, std::generic_category(), describe_ + ": ppoll");
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
            socks_.push_back(std::move(sock));
        }
    }

    // Live frames through the program on the first interface, if every
    // interface can transmit XDP frames (veth: while its peer runs a native
    // XDP program) and the program holds incxdp_tx_frames; else none (the
    // caller sends some other way: max_frame() is 0).
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
        max_frame_ = want;
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
    std::vector<pollfd> polls_;
    std::vector<XskQueueSocket *> held_; ///< sockets whose frames the last receive handed out
    size_t next_sock_ = 0;
    std::vector<std::span<const std::byte>> frames_;
    util::Fd prog_, map_;
    std::unique_ptr<LiveTx> live_;
    uint32_t mtu_ = 0;
    size_t max_frame_ = 0;
};

} // namespace

std::unique_ptr<Transport> make_afxdp_peers_transport(const AfXdpPeersConfig &cfg) {
    return std::make_unique<AfXdpPeersTransport>(cfg);
}

} // namespace incxdp
