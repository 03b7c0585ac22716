// SPDX-License-Identifier: BSD-2-Clause
// The mesh daemon's loop: one UDP socket per interface (SO_BINDTODEVICE, so
// a datagram's socket says which link it came by), a signalfd, and a tick
// every hello interval that sends hellos, notices dead neighbours and down
// interfaces, re-originates and ages LSAs, and, when anything changed,
// recomputes the routes, writes them to the relay and the state file.
#include "mesh_daemon.h"
#include "mesh_relay_port.h"
#include "mesh_wire.h"
#include "port_util.h"

#include <incxdp/mesh_ctl.h>
#include <incxdp/relay.h>

#include <fmt/format.h>

#include <algorithm>
#include <arpa/inet.h>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

namespace incxdp::mesh {

namespace {

uint64_t mono_ms() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return uint64_t(ts.tv_sec) * 1000 + uint64_t(ts.tv_nsec) / 1000000;
}

int64_t unix_ms() {
    using namespace std::chrono;
    return duration_cast<milliseconds>(system_clock::now().time_since_epoch()).count();
}

void log(const std::string &msg) {
    fmt::print(stderr, "incxdp mesh: {}\n", msg);
}

// Every IPv4 interface we are to run on, with its first address.
std::vector<LocalIface> find_ifaces(const std::vector<std::string> &wanted) {
    ifaddrs *list = nullptr;
    if (getifaddrs(&list) != 0)
        throw MeshError(fmt::format("listing interfaces: {}", std::strerror(errno)));
    std::vector<LocalIface> out;
    for (ifaddrs *a = list; a; a = a->ifa_next) {
        if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET || (a->ifa_flags & IFF_LOOPBACK))
            continue;
        const std::string name = a->ifa_name;
        if (wanted.empty() ? !(a->ifa_flags & IFF_UP)
                           : std::find(wanted.begin(), wanted.end(), name) == wanted.end())
            continue;
        if (std::any_of(out.begin(), out.end(),
                        [&](const LocalIface &i) { return i.name == name; }))
            continue;
        LocalIface i;
        i.name = name;
        i.addr = ntohl(reinterpret_cast<sockaddr_in *>(a->ifa_addr)->sin_addr.s_addr);
        const uint32_t mask =
            a->ifa_netmask ? ntohl(reinterpret_cast<sockaddr_in *>(a->ifa_netmask)->sin_addr.s_addr)
                           : 0xffffffffu;
        i.prefix_len = __builtin_popcount(mask);
        // /31 and /32 links have no broadcast address: the limited broadcast,
        // bound to the device, still stays on the link.
        i.bcast = i.prefix_len <= 30 ? (i.addr | ~mask) : 0xffffffffu;
        out.push_back(i);
    }
    freeifaddrs(list);
    for (const std::string &w : wanted)
        if (std::none_of(out.begin(), out.end(), [&](const LocalIface &i) { return i.name == w; }))
            throw MeshError(fmt::format("interface '{}': no such interface with an IPv4 address "
                                        "in this network namespace",
                                        w));
    if (out.empty())
        throw MeshError("no interface that is up and has an IPv4 address (other than loopback); "
                        "name them with --ifaces");
    for (LocalIface &i : out) {
        i.ifindex = ctl::ifindex_of(i.name);
        i.mac = ctl::mac_of(i.name);
    }
    return out;
}

// Up for hellos: administratively up and with carrier (a veth whose peer
// went down loses IFF_RUNNING). ioctl, since sysfs shows the mount's
// namespace, not ours.
bool iface_up(int fd, const std::string &name) {
    ifreq ifr{};
    std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
    if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0)
        return false;
    return (ifr.ifr_flags & IFF_UP) && (ifr.ifr_flags & IFF_RUNNING);
}

int open_socket(const LocalIface &i) {
    const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw MeshError(fmt::format("{}: socket: {}", i.name, std::strerror(errno)));
    const int one = 1;
    auto fail = [&](const char *what) {
        const int err = errno;
        ::close(fd);
        throw MeshError(fmt::format("{}: {}: {}", i.name, what, std::strerror(err)));
    };
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
        fail("SO_REUSEADDR");
    if (setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, sizeof(one)) != 0)
        fail("SO_BROADCAST");
    if (setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, i.name.c_str(), i.name.size()) != 0)
        fail("SO_BINDTODEVICE");
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(INCXDP_MESH_CTL_UDP_PORT);
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    if (bind(fd, reinterpret_cast<sockaddr *>(&sa), sizeof(sa)) != 0)
        fail(fmt::format("bind to UDP port {}", INCXDP_MESH_CTL_UDP_PORT).c_str());
    return fd;
}

class Daemon {
  public:
    explicit Daemon(const DaemonOptions &o) : opts_(o), knobs_(o.knobs), t_(o.timers) {}
    ~Daemon() {
        for (LocalIface &i : ifaces_)
            if (i.fd >= 0)
                ::close(i.fd);
        if (sig_fd_ >= 0)
            ::close(sig_fd_);
    }
    void run();

  private:
    void start();
    void tick(uint64_t now);
    void receive(size_t iface, uint64_t now);
    void on_hello(size_t iface, const Hello &h, uint64_t now);
    void on_lsa(size_t iface, const Lsa &lsa, uint64_t now);
    void originate(uint64_t now);
    void send_on(size_t iface, const std::vector<uint8_t> &msg);
    void recompute(uint64_t now);
    void install(const RouteTable &rt);
    void save(uint64_t now);

    DaemonOptions opts_;
    Knobs knobs_;
    Timers t_;
    std::vector<LocalIface> ifaces_;
    std::vector<uint32_t> addrs_;
    NodeId self_ = 0;
    uint32_t seq_ = 0;
    std::vector<Neighbour> nbrs_;
    Lsdb db_;
    RouteTable routes_;
    std::string topo_ = "partial";
    std::vector<std::string> errors_;
    std::map<NodeId, incxdp_relay_route> installed_;
    std::unique_ptr<RelayPort> relay_;
    int sig_fd_ = -1;
    bool dirty_ = true;   // neighbours changed: originate a new LSA
    bool changed_ = true; // LSDB changed: recompute the routes
    uint64_t last_lsa_ = 0;
    int64_t last_change_unix_ = 0;
    std::string state_file_;
};

void Daemon::start() {
    ifaces_ = find_ifaces(knobs_.ifaces);
    for (const LocalIface &i : ifaces_)
        addrs_.push_back(i.addr);
    std::sort(addrs_.begin(), addrs_.end());
    if (addrs_.size() > INCXDP_MESH_MAX_ADDRS)
        throw MeshError(fmt::format("{} interfaces with addresses, a node advertises at most {}",
                                    addrs_.size(), INCXDP_MESH_MAX_ADDRS));
    self_ = node_id(addrs_);
    // Starting from the clock in tenths of a second makes a restarted
    // daemon's LSAs newer than the ones its previous run left behind.
    seq_ = static_cast<uint32_t>(unix_ms() / 100);
    state_file_ = opts_.state_file.empty() ? state_path(knobs_.pin_dir) : opts_.state_file;

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    sig_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (sig_fd_ < 0)
        throw MeshError(fmt::format("signalfd: {}", std::strerror(errno)));

    for (LocalIface &i : ifaces_)
        i.fd = open_socket(i);
    std::vector<std::string> names;
    for (const LocalIface &i : ifaces_)
        names.push_back(i.name);
    if (opts_.xdp)
        relay_ = attach_relay(knobs_.pin_dir, names, knobs_.mode);
    else
        relay_ = null_relay();
    relay_->set_config(self_, knobs_.relay, knobs_.max_hops);
    std::string list;
    for (const LocalIface &i : ifaces_)
        list += fmt::format("{}{} {}/{}", list.empty() ? "" : ", ", i.name, ip_str(i.addr),
                            i.prefix_len);
    log(fmt::format("node {} on {}; relay {}, {}", id_str(self_), list,
                    opts_.xdp ? "attached" : "not attached (--no-xdp)",
                    knobs_.relay ? "relaying" : "not relaying"));
}

void Daemon::send_on(size_t idx, const std::vector<uint8_t> &msg) {
    const LocalIface &i = ifaces_[idx];
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(INCXDP_MESH_CTL_UDP_PORT);
    sa.sin_addr.s_addr = htonl(i.bcast);
    // A full socket buffer or a link going down loses one message; the
    // next hello or refresh repeats it.
    (void)sendto(i.fd, msg.data(), msg.size(), 0, reinterpret_cast<sockaddr *>(&sa), sizeof(sa));
}

void Daemon::originate(uint64_t now) {
    Lsa lsa;
    lsa.origin = self_;
    lsa.seq = ++seq_;
    lsa.addrs = addrs_;
    for (const Neighbour &n : nbrs_)
        if (lsa.links.size() < INCXDP_MESH_MAX_NEIGHBOURS)
            lsa.links.push_back({n.node, ifaces_[n.iface].addr, n.addr});
    const Lsdb::Entry *old = db_.find(self_);
    if (!old || old->lsa.links != lsa.links)
        changed_ = true;
    db_.offer(lsa, now);
    const auto msg = encode_lsa(lsa, self_);
    for (size_t i = 0; i < ifaces_.size(); i++)
        if (ifaces_[i].up)
            send_on(i, msg);
    last_lsa_ = now;
    dirty_ = false;
}

void Daemon::on_hello(size_t idx, const Hello &h, uint64_t now) {
    auto it = std::find_if(nbrs_.begin(), nbrs_.end(), [&](const Neighbour &n) {
        return n.iface == idx && n.node == h.sender;
    });
    if (it == nbrs_.end()) {
        Neighbour n;
        n.node = h.sender;
        n.iface = idx;
        n.since_ms = now;
        nbrs_.push_back(n);
        it = nbrs_.end() - 1;
        dirty_ = true;
        log(fmt::format("neighbour {} up on {} ({})", id_str(h.sender), ifaces_[idx].name,
                        ip_str(h.link_addr)));
    }
    if (it->addr != h.link_addr || it->mac != h.mac || it->addrs != h.addrs)
        dirty_ = true;
    it->addr = h.link_addr;
    it->mac = h.mac;
    it->addrs = h.addrs;
    it->last_ms = now;
}

void Daemon::on_lsa(size_t idx, const Lsa &lsa, uint64_t now) {
    if (lsa.origin == self_) {
        // Our own, from a previous run: jump past it so ours win again.
        if (seq_newer(lsa.seq, seq_)) {
            seq_ = lsa.seq;
            dirty_ = true;
        }
        return;
    }
    const Lsdb::Entry *old = db_.find(lsa.origin);
    const bool same_content = old && old->lsa.addrs == lsa.addrs && old->lsa.links == lsa.links;
    if (db_.offer(lsa, now) != Lsdb::Offer::Newer)
        return;
    // A refresh keeps the entry alive; only new content moves routes.
    if (!same_content)
        changed_ = true;
    const auto msg = encode_lsa(lsa, self_);
    for (size_t i = 0; i < ifaces_.size(); i++)
        if (i != idx && ifaces_[i].up)
            send_on(i, msg);
}

void Daemon::receive(size_t idx, uint64_t now) {
    uint8_t buf[2048];
    for (;;) {
        const ssize_t n = recv(ifaces_[idx].fd, buf, sizeof(buf), 0);
        if (n < 0)
            return;
        try {
            const Message m = decode(buf, static_cast<size_t>(n));
            if (m.sender == self_ || !ifaces_[idx].up)
                continue;
            if (m.hello)
                on_hello(idx, *m.hello, now);
            else if (m.lsa)
                on_lsa(idx, *m.lsa, now);
        } catch (const MeshError &e) {
            log(fmt::format("{}: dropped a control message: {}", ifaces_[idx].name, e.what()));
        }
    }
}

void Daemon::tick(uint64_t now) {
    // Hellos that queued while this process was not running count first: a
    // daemon descheduled past dead_ms on a loaded host must not declare its
    // neighbours dead with their hellos unread in its sockets.
    for (size_t i = 0; i < ifaces_.size(); i++)
        receive(i, now);
    for (size_t i = 0; i < ifaces_.size(); i++) {
        const bool up = iface_up(ifaces_[i].fd, ifaces_[i].name);
        if (up != ifaces_[i].up) {
            log(fmt::format("{} is {}", ifaces_[i].name, up ? "up" : "down"));
            ifaces_[i].up = up;
            changed_ = true;
        }
    }
    const size_t before = nbrs_.size();
    std::erase_if(nbrs_, [&](const Neighbour &n) {
        const bool dead = !ifaces_[n.iface].up || now - n.last_ms > t_.dead_ms;
        if (dead)
            log(fmt::format("neighbour {} down on {}", id_str(n.node), ifaces_[n.iface].name));
        return dead;
    });
    if (nbrs_.size() != before)
        dirty_ = true;

    Hello h;
    h.sender = self_;
    h.interval_ms = static_cast<uint16_t>(t_.hello_ms);
    h.dead_ms = static_cast<uint16_t>(t_.dead_ms);
    h.addrs = addrs_;
    for (size_t i = 0; i < ifaces_.size(); i++) {
        if (!ifaces_[i].up)
            continue;
        h.link_addr = ifaces_[i].addr;
        h.mac = ifaces_[i].mac;
        send_on(i, encode_hello(h));
    }
    if (dirty_ || now - last_lsa_ >= t_.lsa_refresh_ms)
        originate(now);
    for (NodeId gone : db_.age_out(now, t_.lsa_max_age_ms, self_)) {
        log(fmt::format("node {} aged out", id_str(gone)));
        changed_ = true;
    }
    if (changed_)
        recompute(now);
}

void Daemon::recompute(uint64_t now) {
    changed_ = false;
    const Graph g = graph_of(db_);
    errors_.clear();
    RouteTable rt = compute_routes(g, self_, knobs_.max_hops, INCXDP_RELAY_MAX_NEXTHOPS);
    try {
        topo_ = topo_type_name(resolve_type(g, knobs_.topology));
    } catch (const MeshError &e) {
        topo_ = topo_type_name(classify(g));
        errors_.push_back(e.what());
    }
    for (const auto &e : rt.errors())
        errors_.push_back(e);
    const bool same = rt.routes.size() == routes_.routes.size() &&
                      std::equal(rt.routes.begin(), rt.routes.end(), routes_.routes.begin(),
                                 [](const auto &a, const auto &b) {
                                     return a.first == b.first && a.second.hops == b.second.hops &&
                                            a.second.paths == b.second.paths;
                                 });
    routes_ = std::move(rt);
    try {
        install(routes_);
    } catch (const std::exception &e) {
        errors_.push_back(fmt::format("writing routes to the relay: {}", e.what()));
    }
    if (!same) {
        last_change_unix_ = unix_ms();
        log(fmt::format("{} routes, topology {}", routes_.routes.size(), topo_));
    }
    save(now);
}

void Daemon::install(const RouteTable &rt) {
    std::map<NodeId, incxdp_relay_route> want;
    for (const auto &[dst, r] : rt.routes) {
        incxdp_relay_route v{};
        v.hops = r.hops;
        for (NodeId first : r.first_hops) {
            auto n = std::find_if(nbrs_.begin(), nbrs_.end(),
                                  [&](const Neighbour &x) { return x.node == first; });
            if (n == nbrs_.end() || v.nnexthops >= INCXDP_RELAY_MAX_NEXTHOPS)
                continue;
            const LocalIface &i = ifaces_[n->iface];
            incxdp_relay_nexthop &nh = v.nh[v.nnexthops++];
            nh.ifindex = i.ifindex;
            std::memcpy(nh.src_mac, i.mac.data(), 6);
            std::memcpy(nh.dst_mac, n->mac.data(), 6);
            nh.src_ip = htonl(i.addr);
            nh.dst_ip = htonl(n->addr);
        }
        if (v.nnexthops > 0)
            want[dst] = v;
    }
    for (const auto &[dst, v] : installed_)
        if (!want.count(dst))
            relay_->del_route(dst);
    for (const auto &[dst, v] : want) {
        auto old = installed_.find(dst);
        if (old == installed_.end() || std::memcmp(&old->second, &v, sizeof(v)) != 0)
            relay_->set_route(dst, v);
    }
    installed_ = std::move(want);
}

void Daemon::save(uint64_t now) {
    DaemonView v;
    v.self = self_;
    v.addrs = addrs_;
    v.ifaces = &ifaces_;
    v.neighbours = &nbrs_;
    v.lsdb = &db_;
    v.routes = &routes_;
    v.topology = topo_;
    v.errors = errors_;
    v.knobs = &knobs_;
    v.timers = t_;
    v.relay_attached = opts_.xdp;
    v.now_ms = now;
    v.last_change_unix_ms = last_change_unix_;
    try {
        write_state(state_file_, state_json(v));
    } catch (const MeshError &e) {
        log(e.what());
    }
}

void Daemon::run() {
    start();
    uint64_t next = mono_ms();
    std::vector<pollfd> pfds;
    for (;;) {
        const uint64_t now = mono_ms();
        if (now >= next) {
            tick(now);
            next = now + t_.hello_ms;
        }
        pfds.clear();
        pfds.push_back({sig_fd_, POLLIN, 0});
        for (const LocalIface &i : ifaces_)
            pfds.push_back({i.fd, POLLIN, 0});
        const int timeout = static_cast<int>(next > mono_ms() ? next - mono_ms() : 0);
        if (poll(pfds.data(), pfds.size(), timeout) < 0 && errno != EINTR)
            throw MeshError(fmt::format("poll: {}", std::strerror(errno)));
        if (pfds[0].revents & POLLIN) {
            signalfd_siginfo si{};
            (void)!read(sig_fd_, &si, sizeof(si));
            log(fmt::format("{}: detaching", strsignal(static_cast<int>(si.ssi_signo))));
            break;
        }
        const uint64_t at = mono_ms();
        for (size_t i = 0; i < ifaces_.size(); i++)
            if (pfds[i + 1].revents & POLLIN)
                receive(i, at);
        // Routes follow a received LSA at once, not at the next tick.
        if (changed_)
            recompute(at);
    }
    relay_.reset();
    std::error_code ec;
    std::filesystem::remove(state_file_, ec);
    // The directories state_path() made, as far up as they are empty
    // (remove() leaves a non-empty one alone).
    for (auto dir = std::filesystem::path(state_file_).parent_path();
         dir.string().starts_with("/run/incxdp/") && std::filesystem::remove(dir, ec);)
        dir = dir.parent_path();
}

} // namespace

void run_daemon(const DaemonOptions &opts) {
    const Timers &t = opts.timers;
    // Hellos carry both as u16; a dead interval within one hello interval
    // would drop every neighbour between two hellos.
    if (t.hello_ms == 0 || t.hello_ms > 0xffff || t.dead_ms > 0xffff || t.dead_ms <= t.hello_ms)
        throw MeshError(fmt::format("timers: hello {} ms, dead {} ms: need 1 <= hello < dead <= "
                                    "65535",
                                    t.hello_ms, t.dead_ms));
    Daemon d(opts);
    d.run();
}

} // namespace incxdp::mesh
