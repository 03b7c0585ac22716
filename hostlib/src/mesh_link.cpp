// SPDX-License-Identifier: BSD-2-Clause
#include "mesh_link.h"
#include "xsk_queue_socket.h"

#include <incxdp/relay.h>

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

namespace incxdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;

// Routes move when the daemon reconverges; a cached one is re-read this often.
constexpr auto kRouteTtl = std::chrono::milliseconds(100);
constexpr size_t kBatch = 64;
constexpr size_t kRxBuf = 9216 + 64; // the largest MTU the topologies take, with room
// AF_XDP receive: umem frames per socket (a frame of 64 SMI messages and its
// headers fits one), and how often an AF_XDP link still reads the UDP socket
// (frames the relay delivered to the stack before the sockets were bound).
constexpr uint32_t kXskFrameSize = 4096;
constexpr uint32_t kXskRxFrames = 512;
constexpr unsigned kUdpEvery = 32;

std::string ip_string(uint32_t be) {
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &be, buf, sizeof buf);
    return buf;
}

uint32_t iface_mtu(uint32_t ifindex, std::string *name_out) {
    char name[IF_NAMESIZE] = {};
    if (!if_indextoname(ifindex, name))
        return 0;
    *name_out = name;
    std::ifstream f(std::string("/sys/class/net/") + name + "/mtu");
    uint32_t mtu = 0;
    f >> mtu;
    return mtu;
}

// rx queues of an interface of this namespace (ethtool: sysfs shows the
// namespace it was mounted in), at least 1.
uint32_t rx_queues(const char *ifname) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 1;
    ethtool_channels ch{};
    ch.cmd = ETHTOOL_GCHANNELS;
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", ifname);
    ifr.ifr_data = reinterpret_cast<char *>(&ch);
    uint32_t n = 1;
    if (ioctl(fd, SIOCETHTOOL, &ifr) == 0)
        n = std::max<uint32_t>(1, std::max(ch.rx_count, ch.combined_count));
    ::close(fd);
    return n;
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

struct Fd {
    int fd = -1;
    Fd() = default;
    explicit Fd(int f) : fd(f) {}
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    ~Fd() {
        if (fd >= 0)
            ::close(fd);
    }
};

class UdpLink final : public Link {
  public:
    UdpLink(const std::string &pin_dir, std::optional<uint32_t> self_node,
            const std::string &xdp_who = "")
        : pin_dir_(pin_dir), fixed_self_(self_node) {
        std::string routes = pin_dir + "/" INCXDP_MAP_RELAY_ROUTES;
        routes_.fd = bpf_obj_get(routes.c_str());
        if (routes_.fd < 0)
            throw std::runtime_error(fmt::format(
                "mesh: cannot open the route map {}: {} (no relay on this node with pin dir {}: "
                "`incxdp mesh run` or `incxdp smi run` attaches it)",
                routes, strerror(errno), pin_dir));
        std::string cfg = pin_dir + "/" INCXDP_MAP_RELAY_CFG;
        cfg_.fd = bpf_obj_get(cfg.c_str());
        addrs_ = local_addresses();
        self_ = fixed_self_ ? *fixed_self_ : node_id_of(addrs_);
        read_cfg();

        sock_.fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (sock_.fd < 0)
            throw std::runtime_error(fmt::format("mesh: socket(): {}", strerror(errno)));
        int one = 1, buf = 8 << 20;
        setsockopt(sock_.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        // Root may go past net.core.[rw]mem_max; a window of segments must fit.
        if (setsockopt(sock_.fd, SOL_SOCKET, SO_RCVBUFFORCE, &buf, sizeof buf) != 0)
            setsockopt(sock_.fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof buf);
        if (setsockopt(sock_.fd, SOL_SOCKET, SO_SNDBUFFORCE, &buf, sizeof buf) != 0)
            setsockopt(sock_.fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof buf);
        // DF and no fragments: the relay forwards whole frames only.
        int pmtu = IP_PMTUDISC_PROBE;
        setsockopt(sock_.fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
        sockaddr_in sa{};
        sa.sin_family = AF_INET;
        sa.sin_port = htons(INCXDP_RELAY_UDP_PORT);
        sa.sin_addr.s_addr = htonl(INADDR_ANY);
        if (bind(sock_.fd, reinterpret_cast<sockaddr *>(&sa), sizeof sa) != 0)
            throw std::runtime_error(
                fmt::format("mesh: bind UDP port {}: {} (one endpoint per node)",
                            INCXDP_RELAY_UDP_PORT, strerror(errno)));
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
        std::vector<int> fds;
        for (const XskIface &xi : xsk_ifaces_)
            for (const auto &q : xi.queues)
                fds.push_back(q->fd());
        fds.push_back(sock_.fd);
        return fds;
    }

    std::string delivery() const override {
        if (xsk_ifaces_.empty())
            return "udp";
        return xsk_ifaces_.front().queues.front()->zero_copy() ? "af_xdp zero-copy" : "af_xdp copy";
    }

    uint32_t self_node() const override { return self_; }
    std::vector<uint32_t> addresses() const override { return addrs_; }
    bool relay_enabled() const override { return relay_enabled_; }
    int poll_fd() const override { return sock_.fd; }

    size_t send(std::span<const OutFrame> frames) override {
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
                rh[used] = {};
                rh[used].magic = htons(INCXDP_RELAY_MAGIC);
                rh[used].version = INCXDP_RELAY_VERSION;
                rh[used].kind = f.kind;
                rh[used].total_hops = static_cast<uint8_t>(r->r.hops);
                rh[used].path = f.path;
                rh[used].src_node = htonl(self_);
                rh[used].dst_node = htonl(f.dst_node);
                rh[used].session = htonl(f.session);
                rh[used].payload_len = htonl(static_cast<uint32_t>(f.head_len + f.body_len));
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
            int rc = sendmmsg(sock_.fd, msgs, static_cast<unsigned>(used), 0);
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
        if (!xsk_ifaces_.empty()) {
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
        int rc = recvmmsg(sock_.fd, msgs, static_cast<unsigned>(want), MSG_DONTWAIT, nullptr);
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
        for (detail::XskQueueSocket *s : held_)
            s->release();
        held_.clear();
        size_t n = 0;
        for (XskIface &xi : xsk_ifaces_)
            for (auto &q : xi.queues) {
                if (n >= out.size())
                    return n;
                xsk_frames_.clear();
                q->peek(std::min(out.size() - n, kBatch), xsk_frames_);
                if (xsk_frames_.empty())
                    continue;
                held_.push_back(q.get());
                for (const auto &f : xsk_frames_)
                    if (parse_eth_frame(f, self_, out[n]))
                        n++;
            }
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
    struct XskIface {
        uint32_t ifindex = 0;
        std::vector<std::unique_ptr<detail::XskQueueSocket>> queues;
    };

    // One socket per (relay interface, rx queue), in incxdp_relay_if_xsks
    // under slot * INCXDP_RELAY_XSK_QUEUES + queue; the interface's slot
    // goes in last, so the relay never steers to a socket not yet bound.
    void open_xsks(const std::string &who) {
        auto open_map = [&](const char *name) {
            std::string path = pin_dir_ + "/" + name;
            int fd = bpf_obj_get(path.c_str());
            if (fd < 0)
                throw std::runtime_error(fmt::format("cannot open {}: {}", path, strerror(errno)));
            return fd;
        };
        ifslots_.fd = open_map(INCXDP_MAP_RELAY_IFSLOTS);
        if_xsks_.fd = open_map(INCXDP_MAP_RELAY_IF_XSKS);
        Fd tx(open_map(INCXDP_MAP_RELAY_TX));
        std::vector<uint32_t> ifx;
        uint32_t key = 0, next = 0;
        const void *prev = nullptr;
        while (bpf_map_get_next_key(tx.fd, prev, &next) == 0) {
            ifx.push_back(next);
            key = next;
            prev = &key;
        }
        std::sort(ifx.begin(), ifx.end());
        if (ifx.empty())
            throw std::runtime_error(fmt::format("the relay in {} runs on no interface", pin_dir_));
        for (uint32_t slot = 0; slot < ifx.size() && slot < INCXDP_RELAY_MAX_IFACES; slot++) {
            char name[IF_NAMESIZE] = {};
            if (!if_indextoname(ifx[slot], name))
                throw std::runtime_error(fmt::format("the relay's interface {} is not here: {}",
                                                     ifx[slot], strerror(errno)));
            XskIface xi;
            xi.ifindex = ifx[slot];
            // Queues past INCXDP_RELAY_XSK_QUEUES deliver to the stack.
            const uint32_t nq = std::min<uint32_t>(rx_queues(name), INCXDP_RELAY_XSK_QUEUES);
            for (uint32_t q = 0; q < nq; q++) {
                detail::XskQueueConfig c;
                c.ifname = name;
                c.queue = q;
                c.frame_size = kXskFrameSize;
                c.rx_frames = kXskRxFrames;
                c.batch = kBatch;
                c.describe = who + " on " + name;
                auto sock = std::make_unique<detail::XskQueueSocket>(c);
                uint32_t k = slot * INCXDP_RELAY_XSK_QUEUES + q;
                int fd = sock->fd();
                if (bpf_map_update_elem(if_xsks_.fd, &k, &fd, BPF_ANY) != 0)
                    throw std::runtime_error(fmt::format(
                        "cannot put the socket of {} queue {} into " INCXDP_MAP_RELAY_IF_XSKS
                        ": {}",
                        name, q, strerror(errno)));
                xi.queues.push_back(std::move(sock));
            }
            if (bpf_map_update_elem(ifslots_.fd, &xi.ifindex, &slot, BPF_ANY) != 0)
                throw std::runtime_error(
                    fmt::format("cannot set the slot of {} in " INCXDP_MAP_RELAY_IFSLOTS ": {}",
                                name, strerror(errno)));
            xsk_ifaces_.push_back(std::move(xi));
        }
    }

    // Slots out first (frames go to the stack again), then the sockets,
    // which leave incxdp_relay_if_xsks as they close.
    void close_xsks() {
        held_.clear();
        if (ifslots_.fd >= 0)
            for (const XskIface &xi : xsk_ifaces_)
                bpf_map_delete_elem(ifslots_.fd, &xi.ifindex);
        xsk_ifaces_.clear();
    }

    struct Route {
        incxdp_relay_route r{};
        uint32_t mtu[INCXDP_RELAY_MAX_NEXTHOPS] = {};
        std::string ifname[INCXDP_RELAY_MAX_NEXTHOPS];
        Clock::time_point read_at;
        bool present = false;
    };

    const Route *route(uint32_t dst, bool reread) {
        auto now = Clock::now();
        auto it = routes_cache_.find(dst);
        if (it == routes_cache_.end() || reread || now - it->second.read_at > kRouteTtl) {
            Route r;
            r.read_at = now;
            r.present = bpf_map_lookup_elem(routes_.fd, &dst, &r.r) == 0;
            if (r.present) {
                r.r.nnexthops = std::min<uint32_t>(r.r.nnexthops, INCXDP_RELAY_MAX_NEXTHOPS);
                for (uint32_t i = 0; i < r.r.nnexthops; i++)
                    r.mtu[i] = iface_mtu(r.r.nh[i].ifindex, &r.ifname[i]);
            }
            it = routes_cache_.insert_or_assign(dst, std::move(r)).first;
        }
        return it->second.present ? &it->second : nullptr;
    }

    void read_cfg() {
        if (cfg_.fd < 0)
            return;
        uint32_t key = 0;
        incxdp_relay_cfg c{};
        // SMI's rank 0 is node 0: a fixed id does not wait for a non-zero one.
        if (bpf_map_lookup_elem(cfg_.fd, &key, &c) == 0 && (fixed_self_ || c.self_node != 0)) {
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
    std::vector<XskIface> xsk_ifaces_;
    std::vector<detail::XskQueueSocket *> held_; // sockets whose frames recv() handed out
    std::vector<std::span<const std::byte>> xsk_frames_;
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

} // namespace incxdp::mesh
