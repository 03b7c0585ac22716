// SPDX-License-Identifier: BSD-2-Clause
#include "mesh_link.h"
#include "frame.h"

#include <incxdp/relay.h>
#include <incxdp/transport.h>
#include <incxdp/util/fd.h>
#include <incxdp/util/iface.h>

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

namespace incxdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;
using util::Fd;

// Routes move when the daemon reconverges; a cached one is re-read this often.
constexpr auto kRouteTtl = std::chrono::milliseconds(100);
constexpr size_t kBatch = 64;
constexpr size_t kRxBuf = 9216 + 64; // the largest MTU the topologies take, with room
// AF_XDP receive: umem frames per socket (a frame of 64 SMI messages and its
// headers fits one), and how often an AF_XDP link still reads the UDP socket
// (frames the relay delivered to the stack before the sockets were bound).
constexpr uint32_t kXskFrameSize = 4096;
constexpr uint32_t kXskRxFrames = 512;
constexpr uint32_t kXskRxRoom = kXskFrameSize - XDP_PACKET_HEADROOM; // what copy mode writes
constexpr unsigned kUdpEvery = 32;
constexpr size_t kEthIpUdp = 14 + 20 + 8;
constexpr size_t kTxSlot = 4096; // a frame being built for the AF_XDP transport

std::string ip_string(uint32_t be) {
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &be, buf, sizeof buf);
    return buf;
}

// 0 if the interface is gone.
uint32_t iface_mtu(uint32_t ifindex, std::string *name_out) {
    char name[IF_NAMESIZE] = {};
    if (!if_indextoname(ifindex, name))
        return 0;
    *name_out = name;
    return util::iface_mtu(name).value_or(0);
}

// The relay header of a frame for `self` and its payload; false for
// anything else (frames for another node reach the stack where no relay runs).
bool parse_relay(const uint8_t *p, size_t len, uint32_t self, InFrame &out) {
    if (len < sizeof(incxdp_relay_hdr))
        return false;
    incxdp_relay_hdr h;
    memcpy(&h, p, sizeof h);
    uint32_t plen = ntohl(h.payload_len);
    if (ntohs(h.magic) != INCXDP_RELAY_MAGIC || h.version != INCXDP_RELAY_VERSION ||
        ntohl(h.dst_node) != self || plen > len - sizeof h)
        return false;
    out = InFrame{ntohl(h.src_node), h.kind, h.hops, h.path, ntohl(h.session), p + sizeof h, plen};
    return true;
}

// A whole Ethernet frame from an AF_XDP socket: the relay checked the
// lengths, the IPv4 header length is all that varies.
bool parse_eth_frame(std::span<const std::byte> f, uint32_t self, InFrame &out) {
    const auto *p = reinterpret_cast<const uint8_t *>(f.data());
    constexpr size_t kEth = 14, kUdp = 8;
    if (f.size() < kEth + 20 + kUdp || p[12] != 0x08 || p[13] != 0x00)
        return false;
    const size_t ihl = size_t(p[kEth] & 0xf) * 4;
    if (ihl < 20 || f.size() < kEth + ihl + kUdp || p[kEth + 9] != IPPROTO_UDP)
        return false;
    const size_t off = kEth + ihl + kUdp;
    return parse_relay(p + off, f.size() - off, self, out);
}

class UdpLink final : public Link {
  public:
    UdpLink(const std::string &pin_dir, std::optional<uint32_t> self_node,
            const std::string &xdp_who = "")
        : pin_dir_(pin_dir), fixed_self_(self_node) {
        std::string routes = pin_dir + "/" INCXDP_MAP_RELAY_ROUTES;
        routes_.reset(bpf_obj_get(routes.c_str()));
        if (!routes_)
            throw std::runtime_error(fmt::format(
                "mesh: cannot open the route map {}: {} (no relay on this node with pin dir {}: "
                "`incxdp mesh run` or `incxdp smi run` attaches it)",
                routes, strerror(errno), pin_dir));
        std::string cfg = pin_dir + "/" INCXDP_MAP_RELAY_CFG;
        cfg_.reset(bpf_obj_get(cfg.c_str()));
        addrs_ = local_addresses();
        self_ = fixed_self_ ? *fixed_self_ : node_id_of(addrs_);
        read_cfg();

        sock_.reset(socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        if (!sock_)
            throw std::runtime_error(fmt::format("mesh: socket(): {}", strerror(errno)));
        // No SO_REUSEADDR: a second endpoint on this node must fail to bind,
        // not share the port and silently take some of the first's frames.
        int buf = 8 << 20;
        // Root may go past net.core.[rw]mem_max; a window of segments must fit.
        if (setsockopt(sock_.get(), SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf) != 0)
            setsockopt(sock_.get(), SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
        if (setsockopt(sock_.get(), SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf) != 0)
            setsockopt(sock_.get(), SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
        // DF and no fragments: the relay forwards whole frames only.
        int pmtu = IP_PMTUDISC_PROBE;
        setsockopt(sock_.get(), IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(INCXDP_RELAY_UDP_PORT);
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(sock_.get(), reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0)
            throw std::runtime_error(
                fmt::format("mesh: bind UDP port {}: {} (one endpoint per node{})",
                            INCXDP_RELAY_UDP_PORT, strerror(errno),
                            errno == EADDRINUSE ? ": another process on this node holds it" : ""));
        rxbuf_.resize(kBatch * kRxBuf);
        if (xdp_who.empty())
            return;
        try {
            open_xsks(xdp_who);
        } catch (const std::exception &e) {
            close_xsks();
            std::fprintf(stderr, "%s: AF_XDP delivery unavailable, receiving through UDP: %s\n",
                         xdp_who.c_str(), e.what());
        }
    }

    ~UdpLink() override { close_xsks(); }

    std::vector<int> poll_fds() const override {
        std::vector<int> fds = xsk_ ? xsk_->poll_fds() : std::vector<int>{};
        fds.push_back(sock_.get());
        return fds;
    }

    std::string delivery() const override {
        if (!xsk_)
            return "udp";
        return fmt::format("af_xdp, sending {} ({})", xsk_->max_frame() ? "af_xdp" : "udp",
                           xsk_->describe());
    }

    uint32_t self_node() const override { return self_; }
    std::vector<uint32_t> addresses() const override { return addrs_; }
    bool relay_enabled() const override { return relay_enabled_; }
    int poll_fd() const override { return sock_.get(); }

    // Frames that fit a live frame leave through the AF_XDP transport (no
    // kernel stack: the relay's next hop straight into the link), the others
    // through the UDP socket, in order.
    size_t send(std::span<const OutFrame> frames) override {
        size_t done = 0;
        while (done < frames.size()) {
            const bool xdp = by_xdp(frames[done]);
            size_t end = done + 1;
            while (end < frames.size() && by_xdp(frames[end]) == xdp)
                end++;
            const auto run = frames.subspan(done, end - done);
            const size_t n = xdp ? send_xdp(run) : send_udp(run);
            done += n;
            if (n < run.size())
                break;
        }
        return done;
    }

    bool by_xdp(const OutFrame &f) const {
        return xsk_max_frame_ &&
               kEthIpUdp + sizeof(incxdp_relay_hdr) + f.head_len + f.body_len <= xsk_max_frame_;
    }

    // Each frame built whole for its first hop (the addresses the relay
    // would write when forwarding it), then handed to the transport.
    size_t send_xdp(std::span<const OutFrame> frames) {
        size_t done = 0;
        while (done < frames.size()) {
            const size_t n = std::min(kBatch, frames.size() - done);
            tx_.clear();
            size_t skipped_at_front = 0;
            for (size_t i = 0; i < n; i++) {
                const OutFrame &f = frames[done + i];
                Route *r = route(f.dst_node, false);
                if (!r || r->r.nnexthops == 0) {
                    if (tx_.empty()) {
                        skipped_at_front++; // unroutable: dropped, as a relay would
                        continue;
                    }
                    break;
                }
                const uint32_t which = f.path % r->r.nnexthops;
                std::byte *p = txbuf_.data() + tx_.size() * kTxSlot;
                const size_t payload = sizeof(incxdp_relay_hdr) + f.head_len + f.body_len;
                r->tmpl[which]->write(p, payload);
                const incxdp_relay_hdr rh = relay_hdr(f, r->r.hops);
                std::memcpy(p + kEthIpUdp, &rh, sizeof rh);
                if (f.head_len)
                    std::memcpy(p + kEthIpUdp + sizeof rh, f.head, f.head_len);
                if (f.body_len)
                    std::memcpy(p + kEthIpUdp + sizeof rh + f.head_len, f.body, f.body_len);
                tx_.push_back(
                    {std::span<const std::byte>(p, kEthIpUdp + payload), r->r.nh[which].ifindex});
            }
            done += skipped_at_front;
            if (tx_.empty())
                continue;
            const size_t sent = xsk_->send_frames(tx_);
            done += sent;
            if (sent < tx_.size())
                return done;
        }
        return done;
    }

    incxdp_relay_hdr relay_hdr(const OutFrame &f, uint32_t hops) const {
        incxdp_relay_hdr rh{};
        rh.magic = htons(INCXDP_RELAY_MAGIC);
        rh.version = INCXDP_RELAY_VERSION;
        rh.kind = f.kind;
        rh.total_hops = static_cast<uint8_t>(hops);
        rh.path = f.path;
        rh.src_node = htonl(self_);
        rh.dst_node = htonl(f.dst_node);
        rh.session = htonl(f.session);
        rh.payload_len = htonl(static_cast<uint32_t>(f.head_len + f.body_len));
        return rh;
    }

    size_t send_udp(std::span<const OutFrame> frames) {
        size_t done = 0;
        while (done < frames.size()) {
            size_t n = std::min(kBatch, frames.size() - done);
            mmsghdr msgs[kBatch] = {};
            iovec iov[kBatch][3];
            incxdp_relay_hdr rh[kBatch];
            sockaddr_in to[kBatch];
            size_t used = 0, skipped_at_front = 0;
            for (size_t i = 0; i < n; i++) {
                const OutFrame &f = frames[done + i];
                const Route *r = route(f.dst_node, false);
                if (!r || r->r.nnexthops == 0) {
                    if (used == 0) {
                        skipped_at_front++; // unroutable: dropped, as a relay would
                        continue;
                    }
                    break; // keep order: send what precedes it first
                }
                const auto &nh = r->r.nh[f.path % r->r.nnexthops];
                rh[used] = relay_hdr(f, r->r.hops);
                to[used] = {};
                to[used].sin_family = AF_INET;
                to[used].sin_port = htons(INCXDP_RELAY_UDP_PORT);
                to[used].sin_addr.s_addr = nh.dst_ip;
                iov[used][0] = {&rh[used], sizeof rh[used]};
                iov[used][1] = {const_cast<void *>(f.head), f.head_len};
                iov[used][2] = {const_cast<void *>(f.body), f.body_len};
                msgs[used].msg_hdr.msg_name = &to[used];
                msgs[used].msg_hdr.msg_namelen = sizeof to[used];
                msgs[used].msg_hdr.msg_iov = iov[used];
                msgs[used].msg_hdr.msg_iovlen = 3;
                used++;
            }
            done += skipped_at_front;
            if (used == 0)
                continue;
            int rc = sendmmsg(sock_.get(), msgs, static_cast<unsigned>(used), 0);
            if (rc < 0) {
                if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
                    return done;
                // The first frame's link is down or unreachable: it is lost
                // like a frame on a cut cable, the retransmission recovers.
                done += 1;
                continue;
            }
            done += static_cast<size_t>(rc);
            if (static_cast<size_t>(rc) < used)
                return done;
        }
        return done;
    }

    size_t recv(std::span<InFrame> out) override {
        size_t got = 0;
        if (xsk_) {
            got = recv_xsk(out);
            if (got > 0 || ++udp_turn_ % kUdpEvery != 0)
                return got;
        }
        return got + recv_udp(out.subspan(got));
    }

    size_t recv_udp(std::span<InFrame> out) {
        size_t want = std::min(out.size(), kBatch);
        mmsghdr msgs[kBatch] = {};
        iovec iov[kBatch];
        for (size_t i = 0; i < want; i++) {
            iov[i] = {rxbuf_.data() + i * kRxBuf, kRxBuf};
            msgs[i].msg_hdr.msg_iov = &iov[i];
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        int rc = recvmmsg(sock_.get(), msgs, static_cast<unsigned>(want), MSG_DONTWAIT, nullptr);
        if (rc <= 0)
            return 0;
        size_t n = 0;
        for (int i = 0; i < rc; i++)
            if (parse_relay(rxbuf_.data() + size_t(i) * kRxBuf, msgs[i].msg_len, self_, out[n]))
                n++;
        return n;
    }

    // The previous call's frames go back to their fill rings first: InFrame
    // data is valid until the next recv().
    size_t recv_xsk(std::span<InFrame> out) {
        rx_views_.resize(std::min(out.size(), kBatch));
        const size_t got = xsk_->recv_views(rx_views_, kXskFrameSize);
        size_t n = 0;
        for (size_t i = 0; i < got; i++)
            if (parse_eth_frame(rx_views_[i], self_, out[n]))
                n++;
        return n;
    }

    PathInfo path(uint32_t dst, uint8_t which, bool reread) override {
        PathInfo pi;
        const Route *r = route(dst, reread);
        if (reread)
            read_cfg();
        if (!r || r->r.nnexthops == 0)
            return pi;
        const auto &nh = r->r.nh[which % r->r.nnexthops];
        pi.found = true;
        pi.hops = r->r.hops;
        pi.nnexthops = r->r.nnexthops;
        pi.mtu = r->mtu[which % r->r.nnexthops];
        pi.iface = r->ifname[which % r->r.nnexthops];
        pi.via = ip_string(nh.dst_ip);
        return pi;
    }

    size_t max_payload(uint32_t dst) override {
        const Route *r = route(dst, false);
        uint32_t mtu = 0;
        if (r)
            for (uint32_t i = 0; i < r->r.nnexthops && i < INCXDP_RELAY_MAX_NEXTHOPS; i++)
                mtu = mtu ? std::min(mtu, r->mtu[i]) : r->mtu[i];
        if (mtu == 0)
            mtu = 1500;
        return mtu - 20 - 8 - sizeof(incxdp_relay_hdr); // IPv4, UDP, relay header
    }

  private:
    // The AF_XDP transport over the relay's interfaces (the keys of
    // incxdp_relay_tx, sorted, numbered as slots): its sockets go into
    // incxdp_relay_if_xsks under slot * INCXDP_RELAY_XSK_QUEUES + queue, and
    // each interface's slot in last, so the relay never steers to a socket
    // not yet bound. It sends through the relay program (live frames).
    void open_xsks(const std::string &who) {
        auto open_map = [&](const char *name) {
            std::string path = pin_dir_ + "/" + name;
            int fd = bpf_obj_get(path.c_str());
            if (fd < 0)
                throw std::runtime_error(fmt::format("cannot open {}: {}", path, strerror(errno)));
            return fd;
        };
        ifslots_.reset(open_map(INCXDP_MAP_RELAY_IFSLOTS));
        if_xsks_.reset(open_map(INCXDP_MAP_RELAY_IF_XSKS));
        Fd tx(open_map(INCXDP_MAP_RELAY_TX));
        std::vector<uint32_t> ifx;
        uint32_t key = 0, next = 0;
        const void *prev = nullptr;
        while (bpf_map_get_next_key(tx.get(), prev, &next) == 0) {
            ifx.push_back(next);
            key = next;
            prev = &key;
        }
        std::sort(ifx.begin(), ifx.end());
        if (ifx.empty())
            throw std::runtime_error(fmt::format("the relay in {} runs on no interface", pin_dir_));
        if (ifx.size() > INCXDP_RELAY_MAX_IFACES)
            ifx.resize(INCXDP_RELAY_MAX_IFACES);
        AfXdpPeersConfig c;
        for (uint32_t i : ifx) {
            char name[IF_NAMESIZE] = {};
            if (!if_indextoname(i, name))
                throw std::runtime_error(
                    fmt::format("the relay's interface {} is not here: {}", i, strerror(errno)));
            c.ifnames.push_back(name);
            // The relay delivers every frame for this node to the sockets; the
            // kernel drops one longer than a umem frame holds (no multi-buffer).
            std::string ignored;
            const uint32_t mtu = iface_mtu(i, &ignored);
            if (mtu + 14 > kXskRxRoom)
                throw std::runtime_error(
                    fmt::format("{}'s MTU {} makes frames longer than an AF_XDP frame holds ({} B)",
                                name, mtu, kXskRxRoom));
        }
        c.xskmap_fd = if_xsks_.get();
        c.queue_stride = INCXDP_RELAY_XSK_QUEUES; // queues past it deliver to the stack
        c.frame_size = kXskFrameSize;
        c.rx_frames = kXskRxFrames;
        c.batch = kBatch;
        // INCXDP_MESH_XDP_TX=0: neither live frames nor the tx ring (UDP sends).
        const char *xdp_tx = std::getenv("INCXDP_MESH_XDP_TX");
        c.tx_live_frames = !xdp_tx || std::strcmp(xdp_tx, "0") != 0;
        if (!c.tx_live_frames)
            c.tx_frames = 0;
        c.describe = who;
        xsk_ = make_afxdp_peers_transport(c);
        for (uint32_t slot = 0; slot < ifx.size(); slot++) {
            if (bpf_map_update_elem(ifslots_.get(), &ifx[slot], &slot, BPF_ANY) != 0)
                throw std::runtime_error(
                    fmt::format("cannot set the slot of {} in " INCXDP_MAP_RELAY_IFSLOTS ": {}",
                                c.ifnames[slot], strerror(errno)));
            xsk_ifx_.push_back(ifx[slot]);
        }
        xsk_max_frame_ = std::min<size_t>(xsk_->max_frame(), kTxSlot);
        txbuf_.resize(kBatch * kTxSlot);
        tx_.reserve(kBatch);
    }

    // Slots out first (frames go to the stack again), then the sockets,
    // which leave incxdp_relay_if_xsks as they close.
    void close_xsks() {
        if (ifslots_)
            for (uint32_t ifx : xsk_ifx_)
                bpf_map_delete_elem(ifslots_.get(), &ifx);
        xsk_ifx_.clear();
        xsk_max_frame_ = 0;
        xsk_.reset();
    }

    struct Route {
        incxdp_relay_route r{};
        uint32_t mtu[INCXDP_RELAY_MAX_NEXTHOPS] = {};
        std::string ifname[INCXDP_RELAY_MAX_NEXTHOPS];
        // Ethernet/IPv4/UDP headers to the next hop, relay port both ways.
        std::optional<detail::FrameTemplate> tmpl[INCXDP_RELAY_MAX_NEXTHOPS];
        Clock::time_point read_at;
        bool present = false;
    };

    Route *route(uint32_t dst, bool reread) {
        auto now = Clock::now();
        auto it = routes_cache_.find(dst);
        if (it == routes_cache_.end() || reread || now - it->second.read_at > kRouteTtl) {
            Route r;
            r.read_at = now;
            r.present = bpf_map_lookup_elem(routes_.get(), &dst, &r.r) == 0;
            if (r.present) {
                r.r.nnexthops = std::min<uint32_t>(r.r.nnexthops, INCXDP_RELAY_MAX_NEXTHOPS);
                for (uint32_t i = 0; i < r.r.nnexthops; i++) {
                    const incxdp_relay_nexthop &nh = r.r.nh[i];
                    r.mtu[i] = iface_mtu(nh.ifindex, &r.ifname[i]);
                    detail::FrameAddrs a;
                    std::memcpy(a.src_mac.data(), nh.src_mac, 6);
                    std::memcpy(a.dst_mac.data(), nh.dst_mac, 6);
                    a.src_ip = nh.src_ip;
                    a.dst_ip = nh.dst_ip;
                    a.src_port = a.dst_port = INCXDP_RELAY_UDP_PORT;
                    r.tmpl[i].emplace(a);
                }
            }
            it = routes_cache_.insert_or_assign(dst, std::move(r)).first;
        }
        return it->second.present ? &it->second : nullptr;
    }

    void read_cfg() {
        if (!cfg_)
            return;
        uint32_t key = 0;
        incxdp_relay_cfg c{};
        // SMI's rank 0 is node 0: a fixed id does not wait for a non-zero one.
        if (bpf_map_lookup_elem(cfg_.get(), &key, &c) == 0 && (fixed_self_ || c.self_node != 0)) {
            if (!fixed_self_)
                self_ = c.self_node;
            relay_enabled_ = c.relay_enabled != 0;
        }
    }

    std::string pin_dir_;
    std::optional<uint32_t> fixed_self_;
    Fd routes_, cfg_, sock_;
    std::vector<uint32_t> addrs_;
    uint32_t self_ = 0;
    bool relay_enabled_ = true;
    std::map<uint32_t, Route> routes_cache_;
    std::vector<uint8_t> rxbuf_;
    Fd ifslots_, if_xsks_;
    std::unique_ptr<Transport> xsk_; // AF_XDP over the relay's interfaces, or none
    std::vector<uint32_t> xsk_ifx_;  // ifindex of each slot set in incxdp_relay_ifslots
    size_t xsk_max_frame_ = 0;       // frames up to this long leave through xsk_
    std::vector<std::byte> txbuf_;   // kBatch frames of kTxSlot bytes being sent
    std::vector<FrameOut> tx_;
    std::vector<std::span<const std::byte>> rx_views_;
    unsigned udp_turn_ = 0;
};

} // namespace

std::string PathInfo::describe() const {
    if (!found)
        return "no route";
    return fmt::format("{} hop{} via {} ({}){}", hops, hops == 1 ? "" : "s", iface, via,
                       nnexthops > 1 ? fmt::format(", 1 of {} equal-cost next hops", nnexthops)
                                     : "");
}

std::string default_pin_dir() {
    const char *e = getenv("INCXDP_MESH_PIN_DIR");
    return e && *e ? e : "/sys/fs/bpf/incxdp/mesh";
}

std::vector<uint32_t> local_addresses() {
    std::vector<uint32_t> out;
    ifaddrs *ifa = nullptr;
    if (getifaddrs(&ifa) != 0)
        return out;
    for (ifaddrs *i = ifa; i; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK) ||
            !(i->ifa_flags & IFF_UP))
            continue;
        out.push_back(ntohl(reinterpret_cast<sockaddr_in *>(i->ifa_addr)->sin_addr.s_addr));
    }
    freeifaddrs(ifa);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

uint32_t node_id_of(std::vector<uint32_t> addrs) {
    std::sort(addrs.begin(), addrs.end());
    return incxdp_mesh_node_id(addrs.data(), static_cast<unsigned>(addrs.size()));
}

std::unique_ptr<Link> open_udp_link(const std::string &pin_dir) {
    return std::make_unique<UdpLink>(pin_dir, std::nullopt);
}

std::unique_ptr<Link> open_udp_link(const std::string &pin_dir, uint32_t self_node) {
    return std::make_unique<UdpLink>(pin_dir, self_node);
}

std::unique_ptr<Link> open_xdp_link(const std::string &pin_dir, uint32_t self_node,
                                    const std::string &who) {
    return std::make_unique<UdpLink>(pin_dir, self_node, who.empty() ? "mesh link" : who);
}

std::unique_ptr<Link> open_xdp_link(const std::string &pin_dir, const std::string &who) {
    return std::make_unique<UdpLink>(pin_dir, std::nullopt, who.empty() ? "mesh link" : who);
}

} // namespace incxdp::mesh
