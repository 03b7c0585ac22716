// SPDX-License-Identifier: BSD-2-Clause
#include "mesh_link.h"

#include <incxdp/relay.h>

#include <bpf/bpf.h>
#include <fmt/format.h>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <stdexcept>

namespace incxdp::mesh {
namespace {

using Clock = std::chrono::steady_clock;

// Routes move when the daemon reconverges; a cached one is re-read this often.
constexpr auto kRouteTtl = std::chrono::milliseconds(100);
constexpr size_t kBatch = 64;
constexpr size_t kRxBuf = 9216 + 64; // the largest MTU the topologies take, with room

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
    UdpLink(const std::string &pin_dir, std::optional<uint32_t> self_node)
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
        for (int i = 0; i < rc; i++) {
            const uint8_t *p = rxbuf_.data() + size_t(i) * kRxBuf;
            size_t len = msgs[i].msg_len;
            if (len < sizeof(incxdp_relay_hdr))
                continue;
            incxdp_relay_hdr h;
            memcpy(&h, p, sizeof h);
            uint32_t plen = ntohl(h.payload_len);
            // Frames for another node reach this socket where no relay runs.
            if (ntohs(h.magic) != INCXDP_RELAY_MAGIC || h.version != INCXDP_RELAY_VERSION ||
                ntohl(h.dst_node) != self_ || plen > len - sizeof h)
                continue;
            out[n++] = InFrame{ntohl(h.src_node), h.kind,       h.hops, h.path,
                               ntohl(h.session),  p + sizeof h, plen};
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

} // namespace incxdp::mesh
