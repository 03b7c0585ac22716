// SPDX-License-Identifier: BSD-2-Clause
// The AF_XDP transport: an XDP socket (zero-copy where the driver has it,
// else copy mode, as on veth) with its own umem on every rx queue that frames
// for the worker arrive on, incxdp_xsk steering the worker's UDP port to them,
// frames built and parsed here (frame.h). docs/HOSTLIB.md §5, docs/PERF.md.
#include <incxdp/transport.h>
#include <incxdp/util/iface.h>
#include <incxdp/util/ipv4.h>
#include <incxdp/util/mac.h>

#include "frame.h"
#include "incxdp_xsk.skel.h"
#include "xsk_live_tx.h"
#include "xsk_queue_socket.h"
#include "xsk_ring_tx.h"
#include <incxdp/capture.h>
#include <incxdp/chaos.h>
#include <incxdp/netdev_xdp.h>
#include <incxdp/xdp_frags.h>
#include <incxdp/xdp_prog_maps.h>
#include <incxdp/xsk.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <net/if.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace incxdp {
namespace {

using detail::FrameAddrs;
using detail::FrameTemplate;
using detail::kFrameHdrLen;
using detail::Mac;
using detail::XskQueueConfig;
using detail::XskQueueSocket;

[[noreturn]] void fail(int err, const std::string &what) {
    throw std::system_error(err, std::generic_category(), what);
}

// Network order.
uint32_t parse_ipv4(const std::string &ip, const char *what) {
    return util::ipv4_be_or_throw(ip, fmt::format("afxdp transport: {}", what));
}

// The interface that holds `ip` in this network namespace.
std::string iface_of(uint32_t ip, const std::string &text) {
    ifaddrs *list = nullptr;
    if (getifaddrs(&list) < 0)
        fail(errno, "afxdp transport: getifaddrs");
    std::string name;
    for (ifaddrs *i = list; i; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET &&
            reinterpret_cast<sockaddr_in *>(i->ifa_addr)->sin_addr.s_addr == ip) {
            name = i->ifa_name;
            break;
        }
    freeifaddrs(list);
    if (name.empty())
        fail(EADDRNOTAVAIL, fmt::format("afxdp transport: no interface holds {} (run in the "
                                        "worker's netns?)",
                                        text));
    return name;
}

// The switch's MAC: its complete (or permanent) entry in this namespace's
// neighbour table on `ifname`. Topologies install one (the switch never
// answers ARP).
Mac neighbour_mac(const std::string &ip, const std::string &ifname) {
    std::ifstream f("/proc/net/arp");
    std::string line;
    std::getline(f, line); // header
    while (std::getline(f, line)) {
        std::istringstream is(line);
        std::string addr, hwtype, flags, mac, mask, dev;
        if (!(is >> addr >> hwtype >> flags >> mac >> mask >> dev))
            continue;
        if (addr == ip && dev == ifname && (std::stoul(flags, nullptr, 16) & 0x2 /* ATF_COM */))
            return util::mac_or_throw(mac);
    }
    fail(EHOSTUNREACH,
         fmt::format("afxdp transport: no neighbour entry for the switch {} on {} (AF_XDP "
                     "frames need its MAC: `ip neigh replace {} lladdr MAC dev {} nud permanent`)",
                     ip, ifname, ip, ifname));
}

struct IfInfo {
    unsigned index = 0;
    Mac mac{};
    uint32_t mtu = 0;
};

IfInfo iface_info(const std::string &ifname) {
    IfInfo info;
    info.index = if_nametoindex(ifname.c_str());
    if (info.index == 0)
        fail(errno, fmt::format("afxdp transport: interface {}", ifname));
    auto mac = util::iface_mac(ifname);
    auto mtu = mac ? util::iface_mtu(ifname) : std::nullopt;
    if (!mtu)
        fail(errno, fmt::format("afxdp transport: MAC/MTU of {}", ifname));
    std::memcpy(info.mac.data(), mac->data(), 6);
    info.mtu = *mtu;
    return info;
}

class AfXdpTransport final : public Transport {
  public:
    explicit AfXdpTransport(const AfXdpTransportConfig &cfg) : cfg_(cfg) {
        uint32_t local = parse_ipv4(cfg.local_ip, "local address");
        uint32_t remote = parse_ipv4(cfg.remote_ip, "switch address");
        ifname_ = cfg.ifname.empty() ? iface_of(local, cfg.local_ip) : cfg.ifname;
        IfInfo info = iface_info(ifname_);
        ifindex_ = int(info.index);
        mtu_ = info.mtu;
        // Live frames leave through the interface's ndo_xdp_xmit, which
        // drops them, silently, where the driver has none or (veth) while
        // the peer runs no native XDP program, e.g. a switch whose engine is
        // in generic mode. The tx ring's skbs go through the stack instead.
        std::string notes = cfg.raw_frames ? "raw frames" : "";
        if (cfg_.tx_live_frames) {
            auto feat = netdev::xdp_features(ifindex_);
            if (feat && !(*feat & netdev::kXdpActNdoXmit)) {
                cfg_.tx_live_frames = false;
                notes += (notes.empty() ? "" : ", ") + ("tx ring: no XDP transmit on " + ifname_);
            }
        }
        notes_ = notes;
        describe_queues();
        if (kFrameHdrLen + cfg.max_payload > cfg.frame_size ||
            (info.mtu && 28 + cfg.max_payload > info.mtu))
            throw std::invalid_argument(
                fmt::format("{}: {} B payloads do not fit a {} B umem frame or the MTU {}",
                            describe_, cfg.max_payload, cfg.frame_size, info.mtu));
        FrameAddrs a;
        a.src_mac = info.mac;
        // Raw frames carry the caller's headers; the template only shapes
        // the live-frame probe then.
        if (!cfg.raw_frames)
            a.dst_mac = neighbour_mac(cfg.remote_ip, ifname_);
        a.src_ip = local;
        a.dst_ip = remote;
        a.src_port = cfg.local_port;
        a.dst_port = cfg.remote_port;
        tmpl_.emplace(a);
        try {
            setup();
        } catch (...) {
            teardown();
            throw;
        }
    }

    ~AfXdpTransport() override { teardown(); }

    size_t send_batch(std::span<const std::span<const std::byte>> pkts) override {
        if (live_)
            return send_live(pkts);
        const size_t n = ring_->reserve(std::min(pkts.size(), cfg_.batch));
        for (size_t i = 0; i < n; ++i)
            ring_->set(i, uint32_t(put_frame(ring_->data(i), pkts[i])));
        ring_->submit();
        return n;
    }

    size_t recv_views(std::span<std::span<const std::byte>> out, size_t) override {
        release_rx();
        if (ring_)
            ring_->reap();
        size_t want = std::min(out.size(), cfg_.batch);
        frames_.clear();
        // Every queue's socket, starting one further each time: none starves.
        for (size_t i = 0; i < socks_.size() && frames_.size() < want; ++i)
            socks_[(next_sock_ + i) % socks_.size()]->peek(want - frames_.size(), frames_);
        next_sock_ = (next_sock_ + 1) % socks_.size();
        size_t k = 0;
        for (const auto &frame : frames_) {
            if (cfg_.raw_frames) {
                out[k++] = frame; // incxdp_xsk steered it: local_ip:local_port
                continue;
            }
            // incxdp_xsk steers only our flow here; anything else is skipped.
            if (auto payload =
                    detail::udp_payload_to(frame, tmpl_->addrs().src_ip, cfg_.local_port))
                out[k++] = *payload;
        }
        return k;
    }

    size_t recv_batch(std::span<const std::span<std::byte>> bufs,
                      std::span<size_t> sizes) override {
        return recv_batch_from_views(bufs, sizes);
    }

    void wait(std::chrono::nanoseconds timeout, bool want_send) override {
        // Frames of the last receive go back first, or the kernel may run
        // out of fill-ring frames while we sleep.
        release_rx();
        follow_queues();
        polls_.front().events = short(POLLIN | (want_send ? POLLOUT : 0));
        auto ns = std::max<int64_t>(timeout.count(), 0);
        timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
        if (::ppoll(polls_.data(), polls_.size(), &ts, nullptr) < 0 && errno != EINTR)
            fail(errno, fmt::format("{}: ppoll", describe_));
        if (want_send && ring_)
            ring_->kick();
    }

    bool frames_grow_at_switch() const override { return live_ != nullptr; }

    // In every error and timeout message: with follow_queues off, frames for
    // us on queues without a socket are the likely reason for a stall.
    std::string describe() const override {
        uint64_t missed =
            skel_ ? __atomic_load_n(&skel_->bss->xsk_missed_total, __ATOMIC_RELAXED) : 0;
        if (!missed || cfg_.follow_queues)
            return describe_;
        std::string queues;
        for (uint32_t q = 0; q < INCXDP_XSK_MAX_QUEUES; ++q)
            if (__atomic_load_n(&skel_->bss->xsk_missed[q], __ATOMIC_RELAXED))
                queues += (queues.empty() ? "" : ",") + std::to_string(q);
        return fmt::format(
            "{}; {} frame{} for it arrived on rx queue{} {} without a socket "
            "(follow_queues is off: steer them to queue {}, e.g. `ethtool -N {} flow-type "
            "udp4 dst-port {} action {}`, or turn it on)",
            describe_, missed, missed == 1 ? "" : "s",
            queues.find(',') == std::string::npos ? "" : "s", queues, cfg_.queue, ifname_,
            cfg_.local_port, cfg_.queue);
    }

    // The kernel's own count (XDP_STATISTICS): a frame redirected here is
    // dropped when the rx ring is full (rx_ring_full) or no fill-ring frame
    // is left for it (rx_dropped, which also counts oversized frames).
    uint64_t rx_dropped() const override {
        uint64_t n = 0;
        for (const auto &sock : socks_)
            n += sock->dropped();
        return n;
    }

  private:
    // The frame for datagram `p` at `out` (room for 42 + max_payload bytes):
    // our headers and p as the UDP payload, or p itself in raw mode. Returns
    // the frame length.
    size_t put_frame(std::byte *out, std::span<const std::byte> p) const {
        if (cfg_.raw_frames) {
            size_t len = std::min(p.size(), kFrameHdrLen + cfg_.max_payload);
            std::memcpy(out, p.data(), len);
            return len;
        }
        size_t len = std::min(p.size(), cfg_.max_payload);
        tmpl_->write(out, len);
        std::memcpy(out + kFrameHdrLen, p.data(), len);
        return kFrameHdrLen + len;
    }

    // Frames into incxdp_tx_frames, then one BPF_PROG_RUN of incxdp_xsk
    // (attached, see incxdp_xsk.bpf.c) that redirects each of them out of
    // the interface (xsk_live_tx.h).
    size_t send_live(std::span<const std::span<const std::byte>> pkts) {
        const size_t n = live_->capacity(std::min(pkts.size(), std::max<size_t>(cfg_.batch, 1)));
        for (size_t i = 0; i < n; ++i)
            live_->set(i, uint32_t(put_frame(live_->data(i), pkts[i])), 0);
        return live_->run(n) == 0 ? n : 0; // else the caller retries after wait()
    }

    // The live-frame sender, and a probe of our largest frame.
    void setup_live(uint32_t mtu) {
        live_ =
            std::make_unique<detail::LiveTx>(bpf_program__fd(skel_->progs.incxdp_xsk),
                                             bpf_map__fd(skel_->maps.incxdp_tx_frames), describe_);
        const size_t max_frame = kFrameHdrLen + cfg_.max_payload;
        if (max_frame > live_->slot_bytes() || (mtu && max_frame > mtu + 14))
            throw std::invalid_argument(
                fmt::format("{}: {} B frames exceed the live-frame slots ({} B) or the MTU; "
                            "use the tx ring",
                            describe_, max_frame, live_->slot_bytes()));
        if (int err = live_->try_probe(max_frame))
            fail(-err, fmt::format("{}: BPF_PROG_RUN live frames of {} B{}", describe_, max_frame,
                                   err == -EINVAL ? " (longer than fits one page?); use the tx ring"
                                                  : ""));
    }

    void setup() {
        // Our program, loaded before the socket so the socket can enter its map.
        skel_ = incxdp_xsk__open();
        if (!skel_)
            fail(errno, fmt::format("{}: open incxdp_xsk", describe_));
        skel_->rodata->xsk_local_ip = tmpl_->addrs().src_ip;
        skel_->rodata->xsk_local_port = htons(cfg_.local_port);
        skel_->rodata->xsk_tx_ifindex = uint32_t(ifindex_);
        adopt_maps_of_previous_program();
        // attach() takes over the interface's program in its mode; frags in
        // driver mode only (incxdp/xdp_frags.h).
        mode_ = mode_of(query_xdp());
        if (int err = set_xdp_frags({skel_->progs.incxdp_xsk}, mode_ == XDP_FLAGS_DRV_MODE))
            fail(-err, fmt::format("{}: set xdp.frags on incxdp_xsk", describe_));
        if (int err = incxdp_xsk__load(skel_))
            fail(-err, fmt::format("{}: load incxdp_xsk (needs CAP_BPF)", describe_));

        // The first socket also sends, through its tx ring, unless live
        // frames do (they need no umem frames of their own).
        bind_queue(cfg_.queue, cfg_.tx_live_frames ? 0 : cfg_.tx_frames);
        if (cfg_.tx_live_frames)
            setup_live(mtu_);
        else
            ring_ = std::make_unique<detail::RingTx>(*socks_.front());
        attach();
    }

    // A socket on rx queue `queue`, in incxdp_xsks.
    void bind_queue(uint32_t queue, uint32_t tx_frames) {
        if (queue >= INCXDP_XSK_MAX_QUEUES)
            throw std::invalid_argument(
                fmt::format("{}: rx queue {}: incxdp_xsk steers to queues 0..{} only", describe_,
                            queue, INCXDP_XSK_MAX_QUEUES - 1));
        XskQueueConfig q;
        q.ifname = ifname_;
        q.queue = queue;
        q.frame_size = cfg_.frame_size;
        q.rx_frames = cfg_.rx_frames;
        q.tx_frames = tx_frames;
        q.batch = cfg_.batch;
        q.describe = describe_;
        auto sock = std::make_unique<XskQueueSocket>(q);
        int map_fd = bpf_map__fd(skel_->maps.incxdp_xsks);
        int xfd = sock->fd();
        if (bpf_map_update_elem(map_fd, &queue, &xfd, BPF_ANY) < 0)
            fail(errno,
                 fmt::format("{}: add the socket of rx queue {} to incxdp_xsks", describe_, queue));
        polls_.push_back({xfd, POLLIN, 0});
        socks_.push_back(std::move(sock));
        describe_queues();
    }

    // Frames for us on a queue without a socket (incxdp_xsk counts them by
    // queue): a NIC's RSS or, on veth, the sending CPU chose that queue, and
    // will again. Bind a socket there; what was lost meanwhile comes back by
    // retransmission.
    void follow_queues() {
        if (!cfg_.follow_queues)
            return;
        uint64_t total = __atomic_load_n(&skel_->bss->xsk_missed_total, __ATOMIC_RELAXED);
        if (total == missed_seen_)
            return;
        missed_seen_ = total;
        for (uint32_t q = 0; q < INCXDP_XSK_MAX_QUEUES; ++q) {
            if (!__atomic_load_n(&skel_->bss->xsk_missed[q], __ATOMIC_RELAXED))
                continue;
            if (std::none_of(socks_.begin(), socks_.end(),
                             [q](const auto &s) { return s->queue() == q; }))
                bind_queue(q, 0);
        }
    }

    void describe_queues() {
        std::string queues, notes = notes_;
        for (const auto &sock : socks_)
            queues += (queues.empty() ? "" : ",") + std::to_string(sock->queue());
        if (queues.empty())
            queues = std::to_string(cfg_.queue);
        if (!socks_.empty() && socks_.front()->zero_copy())
            notes += (notes.empty() ? "" : ", ") + std::string("zero-copy");
        describe_ =
            fmt::format("afxdp {}:{} -> {}:{} on {} queue{} {}{}", cfg_.local_ip, cfg_.local_port,
                        cfg_.remote_ip, cfg_.remote_port, ifname_, socks_.size() > 1 ? "s" : "",
                        queues, notes.empty() ? "" : " (" + notes + ")");
    }

    // Two tools keep their state in the maps of the program on the
    // interface: `incxdp chaos --xdp` its rates and counters
    // (bpf/lib/chaos_xdp.h), `incxdp capture` the perf buffers it reads
    // (bpf/lib/capture.h). Ours replaces that program while the transport is
    // open, so it takes over the same maps: faults set before the worker
    // started stay in force, the counters go on when the previous program
    // comes back, and a running capture misses no frame in the moment
    // between our attach and its noticing the new program.
    void adopt_maps_of_previous_program() {
        const struct {
            bpf_map *map;
            const char *name;
        } maps[] = {{skel_->maps.chaos_xdp_cfg, INCXDP_CHAOS_XDP_CONFIG},
                    {skel_->maps.chaos_xdp_stats, INCXDP_CHAOS_XDP_STATS},
                    {skel_->maps.chaos_xdp_dup, INCXDP_CHAOS_XDP_DUP},
                    {skel_->maps.incxdp_capture, INCXDP_CAPTURE_MAP}};
        for (const auto &m : maps) {
            int fd = xdpmaps::map_fd_on_iface(ifindex_, m.name, int(bpf_map__type(m.map)));
            if (fd < 0)
                continue;
            int err = bpf_map__reuse_fd(m.map, fd); // takes its own duplicate
            ::close(fd);
            if (err)
                fail(-err, fmt::format("{}: adopt map {} of the interface's XDP program", describe_,
                                       m.name));
        }
    }

    // The interface's XDP programs.
    bpf_xdp_query_opts query_xdp() {
        bpf_xdp_query_opts q{};
        q.sz = sizeof(q);
        if (int err = bpf_xdp_query(ifindex_, 0, &q))
            fail(-err, fmt::format("{}: query XDP program", describe_));
        return q;
    }
    // The mode incxdp_xsk takes over: generic (skb) if that is all the
    // interface has, else driver.
    static uint32_t mode_of(const bpf_xdp_query_opts &q) {
        return q.skb_prog_id && !q.drv_prog_id ? XDP_FLAGS_SKB_MODE : XDP_FLAGS_DRV_MODE;
    }

    // Swap incxdp_xsk in for the interface's program in one step
    // (XDP_FLAGS_REPLACE with the old program's fd), so frames the switch
    // redirects here always find a program. In mode_, chosen at load.
    void attach() {
        bpf_xdp_query_opts q = query_xdp();
        uint32_t old_id = mode_ == XDP_FLAGS_SKB_MODE ? q.skb_prog_id : q.drv_prog_id;
        int prog_fd = bpf_program__fd(skel_->progs.incxdp_xsk);
        bpf_xdp_attach_opts o{};
        o.sz = sizeof(o);
        uint32_t flags = mode_;
        if (old_id) {
            old_fd_ = bpf_prog_get_fd_by_id(old_id);
            if (old_fd_ < 0)
                fail(errno, fmt::format("{}: fd of XDP program {}", describe_, old_id));
            o.old_prog_fd = old_fd_;
            flags |= XDP_FLAGS_REPLACE;
        } else {
            flags |= XDP_FLAGS_UPDATE_IF_NOEXIST;
        }
        if (int err = bpf_xdp_attach(ifindex_, prog_fd, flags, &o))
            fail(-err, fmt::format("{}: attach incxdp_xsk{} (another AF_XDP transport or XDP "
                                   "tool changed the interface?)",
                                   describe_, old_id ? " in place of the current program" : ""));
        attached_ = true;
    }

    // Put the previous program back (only if ours is still the one
    // attached); without one, ours stays: with no socket it passes all.
    void detach() {
        if (!attached_)
            return;
        attached_ = false;
        if (old_fd_ < 0)
            return;
        bpf_xdp_attach_opts o{};
        o.sz = sizeof(o);
        o.old_prog_fd = bpf_program__fd(skel_->progs.incxdp_xsk);
        int err = bpf_xdp_attach(ifindex_, old_fd_, mode_ | XDP_FLAGS_REPLACE, &o);
        if (err)
            std::fprintf(stderr, "incxdp: %s: could not restore the previous XDP program: %s\n",
                         describe_.c_str(), std::strerror(-err));
    }

    void teardown() {
        detach();
        live_.reset();  // borrows the program and map of skel_
        ring_.reset();  // borrows the first socket
        socks_.clear(); // a socket leaves incxdp_xsks when it closes
        if (skel_)
            incxdp_xsk__destroy(skel_);
        skel_ = nullptr;
        if (old_fd_ >= 0)
            ::close(old_fd_);
        old_fd_ = -1;
    }

    // Hand the frames of the last receive back to the kernel's fill rings.
    void release_rx() {
        for (const auto &sock : socks_)
            sock->release();
    }

    AfXdpTransportConfig cfg_;
    std::string ifname_, describe_, notes_;
    int ifindex_ = 0;
    uint32_t mtu_ = 0;
    std::optional<FrameTemplate> tmpl_;

    /// One per rx queue frames for us arrive on; the first (cfg_.queue) sends.
    std::vector<std::unique_ptr<XskQueueSocket>> socks_;
    size_t next_sock_ = 0;      ///< the socket a receive starts with
    uint64_t missed_seen_ = 0;  ///< xsk_missed_total when follow_queues() last looked
    std::vector<pollfd> polls_; ///< one per socket, in socks_'s order
    incxdp_xsk *skel_ = nullptr;

    uint32_t mode_ = XDP_FLAGS_DRV_MODE;
    int old_fd_ = -1;
    bool attached_ = false;

    std::unique_ptr<detail::LiveTx> live_; ///< live-frame sending (tx_live_frames)
    std::unique_ptr<detail::RingTx> ring_; ///< else the first socket's tx ring

    std::vector<std::span<const std::byte>> frames_; ///< the last receive's, all sockets
};

} // namespace

LinkInfo resolve_link(const std::string &local_ip, const std::string &remote_ip,
                      const std::string &ifname) {
    uint32_t local = parse_ipv4(local_ip, "local address");
    parse_ipv4(remote_ip, "switch address");
    LinkInfo l;
    l.ifname = ifname.empty() ? iface_of(local, local_ip) : ifname;
    IfInfo info = iface_info(l.ifname);
    l.local_mac = info.mac;
    l.mtu = info.mtu;
    l.remote_mac = neighbour_mac(remote_ip, l.ifname);
    return l;
}

std::unique_ptr<Transport> make_afxdp_transport(const AfXdpTransportConfig &cfg) {
    return std::make_unique<AfXdpTransport>(cfg);
}

} // namespace incxdp
