// SPDX-License-Identifier: BSD-2-Clause
#include "cm_replay.h"

#include "cm_payload.h"

#include <incxdp/util/fd.h>
#include <incxdp/util/ipv4.h>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <set>
#include <stdexcept>
#include <tuple>

namespace incxdp::cm {

bool ReplayResult::ok() const {
    if (!errors.empty() || timed_out)
        return false;
    return std::all_of(flows.begin(), flows.end(),
                       [](const FlowResult &f) { return f.state == "done" && f.verified; });
}

namespace {

using Clock = std::chrono::steady_clock;

// Every connection starts with this, so the receiver knows the flow.
struct StreamHeader {
    uint32_t magic;
    uint32_t flow_id;
    uint64_t size;
};
static_assert(sizeof(StreamHeader) == 16, "no padding on the wire");
constexpr uint32_t kMagic = 0x4d435849; // "IXCM"
constexpr size_t kHdr = sizeof(StreamHeader);
constexpr size_t kChunk = 64 * 1024;
// Chunks one socket may move per event, so that one fast flow does not
// starve the others (and their timestamps) in the single loop.
constexpr int kChunksPerEvent = 4;

using util::Fd;

std::string errno_str(int e) {
    return fmt::format("{} ({})", std::strerror(e), e);
}

struct Ep {
    enum Kind { Listen, Send, Recv, Inc } kind;
    size_t idx;
};

struct FlowState {
    const Flow *f = nullptr;
    FlowResult res;
    Fd fd;
    bool connected = false, awaiting_ack = false;
    uint64_t stream_off = 0; // bytes of header + payload already sent
    std::vector<uint8_t> buf;
    size_t buf_pos = 0;
    uint8_t ack[8]{};
    size_t ack_got = 0;
    bool has_receiver = false;
    Ep ep{Ep::Send, 0};
};

struct Receiver {
    Fd fd;
    uint32_t host = 0; // the listener's host index
    uint8_t hdr[kHdr]{};
    size_t hdr_got = 0;
    long flow = -1;
    uint64_t got = 0;
    uint8_t part[4]{};
    bool complete = false;
    Ep ep{Ep::Recv, 0};
};

struct TriggerState {
    TriggerResult *res = nullptr;
    std::vector<size_t> waiting; // file order
    size_t next = 0;             // multishot: next waiting flow
    uint32_t fired = 0;
};

class Replayer {
  public:
    Replayer(const Matrix &m, const topo::Topology &t, const ReplayOptions &o,
             std::unique_ptr<IncPath> inc)
        : m_(m), t_(t), o_(o), inc_(inc ? std::move(inc) : std::make_unique<HostIncPath>(m)) {}

    ReplayResult run();

  private:
    double now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }
    int socket_in(uint32_t host);
    void setup();
    void release(size_t i);
    void open(size_t i);
    void fire(uint32_t trigger);
    void fail(size_t i, const std::string &why);
    void inc_done();
    void on_send(size_t i, uint32_t events);
    void on_listen(size_t host);
    void on_recv(size_t r);
    void take(Receiver &r, const uint8_t *data, size_t n);
    void finish_recv(Receiver &r);
    void close_recv(Receiver &r);
    void progress();
    void warm_up();

    const Matrix &m_;
    const topo::Topology &t_;
    ReplayOptions o_;
    std::unique_ptr<IncPath> inc_;
    Ep inc_ep_{Ep::Inc, 0};
    ReplayResult res_;
    std::vector<const topo::Node *> hosts_;
    std::map<uint32_t, Fd> ns_;
    Fd orig_ns_, ep_;
    std::map<uint32_t, Fd> listen_;
    std::deque<Ep> listen_eps_;
    std::vector<FlowState> flows_;
    std::map<uint32_t, size_t> by_id_;
    std::map<uint32_t, TriggerState> trig_;
    std::deque<Receiver> recvs_;
    std::vector<std::pair<double, size_t>> timed_; // (wall seconds, flow), sorted
    size_t timed_next_ = 0;
    size_t finished_ = 0, running_ = 0;
    Clock::time_point t0_;
};

int Replayer::socket_in(uint32_t host) {
    if (::setns(ns_.at(host).get(), CLONE_NEWNET) != 0)
        throw std::runtime_error(fmt::format("setns into {}: {}",
                                             topo::netns_name(o_.prefix, hosts_[host]->name),
                                             errno_str(errno)));
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int err = errno;
    if (::setns(orig_ns_.get(), CLONE_NEWNET) != 0)
        throw std::runtime_error("setns back into the original namespace: " + errno_str(errno));
    if (fd < 0)
        throw std::runtime_error("socket: " + errno_str(err));
    return fd;
}

sockaddr_in addr_of(const std::string &ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    const auto be = util::parse_ipv4_be(ip);
    if (!be)
        throw std::runtime_error("bad host address " + ip);
    a.sin_addr.s_addr = *be;
    return a;
}

void Replayer::setup() {
    if (!m_.failures.empty() && !o_.ignore_failures) {
        const Failure &f = m_.failures.front();
        throw std::runtime_error(fmt::format(
            "line {}: failure switch_type {} switch_id {} link_id {}: replay does not fail "
            "links (the fat-tree's routes are static: a link down would drop its share of "
            "the flows instead of rerouting them as htsim does); --ignore-failures runs the "
            "flows with every link up",
            f.line, switch_type_name(f.type), f.switch_id, f.link_id));
    }
    for (const topo::Node &n : t_.nodes)
        if (n.kind == topo::NodeKind::Host)
            hosts_.push_back(&n);
    for (const Flow &f : m_.flows) {
        if (std::max(f.src, f.dst) >= hosts_.size())
            throw std::runtime_error(fmt::format(
                "flow {} (line {}): node {} but topology '{}' has {} hosts (host i of the "
                "matrix is the topology's i-th host)",
                f.id, f.line, std::max(f.src, f.dst), t_.name, hosts_.size()));
        if (f.size == 0)
            throw std::runtime_error(fmt::format(
                "flow {} (line {}): size 0 (unbounded) cannot be replayed", f.id, f.line));
    }
    orig_ns_ = Fd(::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC));
    if (orig_ns_.get() < 0)
        throw std::runtime_error("open /proc/self/ns/net: " + errno_str(errno));
    for (const Flow &f : m_.flows)
        for (uint32_t h : {f.src, f.dst}) {
            if (ns_.count(h))
                continue;
            const std::string ns = topo::netns_name(o_.prefix, hosts_[h]->name);
            Fd fd(::open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC));
            if (fd.get() < 0)
                throw std::runtime_error(fmt::format(
                    "namespace {} of host {} (node {}): {}; bring the topology up first "
                    "(incxdp topo up FILE --prefix {})",
                    ns, hosts_[h]->name, h, errno_str(errno), o_.prefix));
            ns_[h] = std::move(fd);
        }
    // Thousands of flows may be open at once.
    rlimit rl{};
    if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        ::setrlimit(RLIMIT_NOFILE, &rl);
    }
    ep_ = Fd(::epoll_create1(EPOLL_CLOEXEC));
    if (ep_.get() < 0)
        throw std::runtime_error("epoll_create1: " + errno_str(errno));
    for (const Flow &f : m_.flows) {
        if (listen_.count(f.dst))
            continue;
        Fd fd(socket_in(f.dst));
        int one = 1;
        ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a = addr_of(hosts_[f.dst]->ip, o_.port);
        if (::bind(fd.get(), reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 ||
            ::listen(fd.get(), 4096) != 0)
            throw std::runtime_error(
                fmt::format("listen on {}:{} in {}: {}", hosts_[f.dst]->ip, o_.port,
                            topo::netns_name(o_.prefix, hosts_[f.dst]->name), errno_str(errno)));
        Ep &e = listen_eps_.emplace_back(Ep{Ep::Listen, f.dst});
        epoll_event ev{EPOLLIN, {.ptr = &e}};
        ::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd.get(), &ev);
        listen_[f.dst] = std::move(fd);
    }
    for (const Trigger &t : m_.triggers)
        res_.triggers.push_back({t.id, t.kind, t.count, {}, 0});
    for (TriggerResult &tr : res_.triggers)
        trig_[tr.id].res = &tr;
    flows_.resize(m_.flows.size());
    for (size_t i = 0; i < m_.flows.size(); ++i) {
        const Flow &f = m_.flows[i];
        FlowState &fs = flows_[i];
        fs.f = &f;
        fs.ep.idx = i;
        fs.res.id = f.id;
        fs.res.src = f.src;
        fs.res.dst = f.dst;
        fs.res.src_host = hosts_[f.src]->name;
        fs.res.dst_host = hosts_[f.dst]->name;
        fs.res.size = f.size;
        fs.res.semantics = f.semantics;
        by_id_[f.id] = i;
        if (f.trigger)
            trig_[*f.trigger].waiting.push_back(i);
        else
            timed_.push_back({*f.start_ps * 1e-12 * o_.scale_start, i});
        if (f.semantics)
            res_.inc_flows++;
    }
    std::stable_sort(timed_.begin(), timed_.end(),
                     [](const auto &a, const auto &b) { return a.first < b.first; });
}

void Replayer::release(size_t i) {
    FlowState &fs = flows_[i];
    fs.res.released_s = now();
    if (!fs.f->semantics)
        return open(i);
    switch (inc_->release(*fs.f, i)) {
    case IncStart::Open:
        return open(i);
    case IncStart::Held:
        fs.res.state = "held";
        fs.res.held = true;
        return;
    case IncStart::Taken:
        fs.res.start_s = fs.res.released_s;
        fs.res.state = "running";
        running_++;
        return;
    }
}

void Replayer::open(size_t i) {
    FlowState &fs = flows_[i];
    const Flow &f = *fs.f;
    fs.fd = Fd(socket_in(f.src));
    fs.res.start_s = now();
    fs.res.state = "running";
    running_++;
    sockaddr_in a = addr_of(hosts_[f.dst]->ip, o_.port);
    if (::connect(fs.fd.get(), reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 &&
        errno != EINPROGRESS)
        return fail(
            i, fmt::format("connect to {}:{}: {}", hosts_[f.dst]->ip, o_.port, errno_str(errno)));
    epoll_event ev{EPOLLOUT, {.ptr = &fs.ep}};
    ::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fs.fd.get(), &ev);
}

void Replayer::fire(uint32_t id) {
    TriggerState &ts = trig_.at(id);
    ts.res->firings_s.push_back(now());
    ts.fired++;
    const Trigger &t = *m_.trigger(id);
    std::vector<size_t> start;
    switch (t.kind) {
    case TriggerKind::Oneshot:
        if (ts.fired == 1)
            start = ts.waiting;
        break;
    case TriggerKind::Multishot:
        if (ts.next < ts.waiting.size())
            start.push_back(ts.waiting[ts.next++]);
        break;
    case TriggerKind::Barrier:
        if (ts.fired == t.count)
            start = ts.waiting;
        break;
    }
    if (start.empty())
        ts.res->ignored++;
    for (size_t i : start)
        release(i);
}

void Replayer::fail(size_t i, const std::string &why) {
    FlowState &fs = flows_[i];
    if (fs.res.state == "failed" || fs.res.state == "done")
        return;
    if (fs.res.state == "running")
        running_--;
    fs.res.state = "failed";
    fs.res.error = why;
    fs.fd.reset();
    finished_++;
}

// Flows the INC path completed: as if the receiver had every byte, then
// the sender its ack (recv_done, then send_done).
void Replayer::inc_done() {
    for (const IncDone &d : inc_->done()) {
        FlowState &fs = flows_[d.flow];
        if (fs.res.state != "running")
            continue;
        if (!d.error.empty()) {
            fail(d.flow, d.error);
            continue;
        }
        const Flow &f = *fs.f;
        const double at = d.at < 0 ? now() : d.at;
        fs.res.received = f.size;
        fs.res.recv_done_s = fs.res.send_done_s = at;
        fs.res.verified = d.verified;
        fs.res.state = "done";
        res_.total_bytes += f.size;
        (f.semantics->dir == AggDir::Up ? res_.up_bytes : res_.down_bytes) += f.size;
        running_--;
        finished_++;
        if (f.recv_done)
            fire(*f.recv_done);
        if (f.send_done)
            fire(*f.send_done);
    }
}

void Replayer::on_send(size_t i, uint32_t events) {
    FlowState &fs = flows_[i];
    const Flow &f = *fs.f;
    if (!fs.connected) {
        int err = 0;
        socklen_t len = sizeof err;
        ::getsockopt(fs.fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err)
            return fail(i, fmt::format("connect {} -> {}:{}: {}", fs.res.src_host,
                                       hosts_[f.dst]->ip, o_.port, errno_str(err)));
        fs.connected = true;
    }
    const uint64_t total = kHdr + f.size;
    for (int budget = kChunksPerEvent; !fs.awaiting_ack;) {
        if (fs.buf_pos == fs.buf.size()) {
            if (budget-- == 0)
                return; // level-triggered: the next event continues
            const uint64_t off = fs.stream_off;
            const size_t n = static_cast<size_t>(std::min<uint64_t>(kChunk, total - off));
            fs.buf.resize(n);
            fs.buf_pos = 0;
            size_t at = 0;
            if (off < kHdr) {
                StreamHeader h{kMagic, f.id, f.size};
                at = std::min(n, kHdr - static_cast<size_t>(off));
                std::memcpy(fs.buf.data(), reinterpret_cast<uint8_t *>(&h) + off, at);
            }
            const uint64_t poff = off + at - kHdr;
            if (f.semantics)
                inc_->payload(f, poff, fs.buf.data() + at, n - at);
            else
                pattern_bytes(f.id, poff, fs.buf.data() + at, n - at);
        }
        ssize_t w = ::send(fs.fd.get(), fs.buf.data() + fs.buf_pos, fs.buf.size() - fs.buf_pos,
                           MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            return fail(i, "send: " + errno_str(errno));
        }
        fs.buf_pos += static_cast<size_t>(w);
        fs.stream_off += static_cast<uint64_t>(w);
        if (fs.stream_off == total) {
            fs.awaiting_ack = true;
            epoll_event ev{EPOLLIN, {.ptr = &fs.ep}};
            ::epoll_ctl(ep_.get(), EPOLL_CTL_MOD, fs.fd.get(), &ev);
            return;
        }
    }
    if (!(events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
        return;
    ssize_t r = ::recv(fs.fd.get(), fs.ack + fs.ack_got, sizeof fs.ack - fs.ack_got, 0);
    if (r < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (r <= 0)
        return fail(i, r == 0 ? "receiver closed before acknowledging"
                              : "recv ack: " + errno_str(errno));
    fs.ack_got += static_cast<size_t>(r);
    if (fs.ack_got < sizeof fs.ack)
        return;
    uint64_t acked;
    std::memcpy(&acked, fs.ack, sizeof acked);
    if (acked != f.size)
        return fail(i, fmt::format("receiver acknowledged {} of {} bytes", acked, f.size));
    fs.fd.reset();
    fs.res.send_done_s = now();
    fs.res.state = "done";
    running_--;
    finished_++;
    if (f.send_done)
        fire(*f.send_done);
}

void Replayer::on_listen(size_t host) {
    for (;;) {
        int fd = ::accept4(listen_.at(static_cast<uint32_t>(host)).get(), nullptr, nullptr,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != EINTR)
                res_.errors.push_back(
                    fmt::format("accept on {}: {}", hosts_[host]->name, errno_str(errno)));
            return;
        }
        Receiver &r = recvs_.emplace_back();
        r.fd = Fd(fd);
        r.host = static_cast<uint32_t>(host);
        r.ep.idx = recvs_.size() - 1;
        epoll_event ev{EPOLLIN, {.ptr = &r.ep}};
        ::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, fd, &ev);
    }
}

void Replayer::close_recv(Receiver &r) {
    r.fd.reset();
}

void Replayer::take(Receiver &r, const uint8_t *data, size_t n) {
    while (n && r.hdr_got < kHdr) {
        size_t c = std::min(n, kHdr - r.hdr_got);
        std::memcpy(r.hdr + r.hdr_got, data, c);
        r.hdr_got += c;
        data += c;
        n -= c;
        if (r.hdr_got < kHdr)
            return;
        StreamHeader h;
        std::memcpy(&h, r.hdr, kHdr);
        auto it = by_id_.find(h.flow_id);
        if (h.magic != kMagic || it == by_id_.end() || flows_[it->second].f->dst != r.host ||
            flows_[it->second].has_receiver || h.size != flows_[it->second].f->size) {
            res_.errors.push_back(fmt::format(
                "{}: a connection announced flow {} of {} bytes, which is not a flow to it",
                hosts_[r.host]->name, h.flow_id, h.size));
            return close_recv(r);
        }
        r.flow = static_cast<long>(it->second);
        flows_[it->second].has_receiver = true;
    }
    if (!n)
        return;
    FlowState &fs = flows_[static_cast<size_t>(r.flow)];
    const Flow &f = *fs.f;
    if (r.got + n > f.size) {
        fail(static_cast<size_t>(r.flow), "more bytes than the flow's size arrived");
        return close_recv(r);
    }
    uint8_t want[kChunk];
    for (size_t done = 0; done < n;) {
        const size_t c = std::min(n - done, kChunk);
        if (f.semantics)
            inc_->expected(f, r.got, want, c);
        else
            pattern_bytes(f.id, r.got, want, c);
        if (std::memcmp(want, data + done, c) != 0) {
            size_t k = 0;
            while (want[k] == data[done + k])
                ++k;
            fail(static_cast<size_t>(r.flow), fmt::format("byte {} is {:#04x}, expected {:#04x}",
                                                          r.got + k, data[done + k], want[k]));
            return close_recv(r);
        }
        if (f.semantics && f.semantics->dir == AggDir::Up)
            for (size_t k = 0; k < c; ++k) {
                const uint64_t o = r.got + k;
                r.part[o % 4] = data[done + k];
                if (o % 4 == 3) {
                    int32_t v;
                    std::memcpy(&v, r.part, 4);
                    inc_->fold(f, o / 4, v);
                }
            }
        r.got += c;
        fs.res.received = r.got;
        res_.total_bytes += c;
        if (f.semantics)
            (f.semantics->dir == AggDir::Up ? res_.up_bytes : res_.down_bytes) += c;
        done += c;
    }
    if (r.got == f.size)
        finish_recv(r);
}

void Replayer::finish_recv(Receiver &r) {
    const size_t i = static_cast<size_t>(r.flow);
    FlowState &fs = flows_[i];
    const Flow &f = *fs.f;
    r.complete = true;
    fs.res.recv_done_s = now();
    fs.res.verified = true;
    uint64_t ack = f.size;
    if (::send(r.fd.get(), &ack, sizeof ack, MSG_NOSIGNAL) != sizeof ack)
        return fail(i, "sending the ack: " + errno_str(errno));
    if (f.recv_done)
        fire(*f.recv_done);
    if (f.semantics && f.semantics->dir == AggDir::Up)
        for (size_t d : inc_->up_done(f))
            open(d);
}

void Replayer::on_recv(size_t idx) {
    Receiver &r = recvs_[idx];
    uint8_t buf[kChunk];
    for (int budget = kChunksPerEvent; budget > 0; --budget) {
        if (r.fd.get() < 0)
            return;
        ssize_t n = ::recv(r.fd.get(), buf, sizeof buf, 0);
        if (n < 0) {
            if (errno != EAGAIN && errno != EINTR) {
                if (r.flow >= 0 && !r.complete)
                    fail(static_cast<size_t>(r.flow), "recv: " + errno_str(errno));
                close_recv(r);
            }
            return;
        }
        if (n == 0) {
            if (r.flow >= 0 && !r.complete)
                fail(static_cast<size_t>(r.flow),
                     fmt::format("connection closed after {} bytes", r.got));
            return close_recv(r);
        }
        take(r, buf, static_cast<size_t>(n));
    }
}

void Replayer::progress() {
    if (!o_.progress)
        return;
    size_t done = 0;
    for (const FlowState &fs : flows_)
        done += fs.res.state == "done";
    std::fprintf(stderr, "replay: %.0f s: %zu/%zu flows done, %zu running, %llu bytes\n", now(),
                 done, flows_.size(), running_, static_cast<unsigned long long>(res_.total_bytes));
}

// One connection per (src, dst) pair before the clock starts, so that ARP
// on every hop is resolved: otherwise the first SYNs of a cold fabric wait
// for it or are dropped and retried after a second. The listeners accept
// these later as connections without a header and close them.
void Replayer::warm_up() {
    std::set<std::pair<uint32_t, uint32_t>> pairs;
    for (const Flow &f : m_.flows)
        pairs.insert({f.src, f.dst});
    Fd ep(::epoll_create1(EPOLL_CLOEXEC));
    if (ep.get() < 0)
        throw std::runtime_error("epoll_create1: " + errno_str(errno));
    std::vector<Fd> socks;
    for (const auto &[src, dst] : pairs) {
        Fd fd(socket_in(src));
        sockaddr_in a = addr_of(hosts_[dst]->ip, o_.port);
        if (::connect(fd.get(), reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 &&
            errno != EINPROGRESS)
            continue; // the flow itself will report it
        epoll_event ev{EPOLLOUT, {.u64 = socks.size()}};
        ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd.get(), &ev);
        socks.push_back(std::move(fd));
    }
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    size_t pending = socks.size();
    epoll_event evs[256];
    while (pending > 0 && Clock::now() < deadline) {
        int n = ::epoll_wait(ep.get(), evs, 256, 100);
        for (int k = 0; k < n; ++k) {
            ::epoll_ctl(ep.get(), EPOLL_CTL_DEL, socks[evs[k].data.u64].get(), nullptr);
            pending--;
        }
    }
}

ReplayResult Replayer::run() {
    setup();
    warm_up();
    Counters before;
    if (o_.counters)
        before = read_counters(t_, o_.prefix);
    if (inc_->fd() >= 0) {
        epoll_event ev{EPOLLIN, {.ptr = &inc_ep_}};
        if (::epoll_ctl(ep_.get(), EPOLL_CTL_ADD, inc_->fd(), &ev) != 0)
            throw std::runtime_error("epoll_ctl (INC path): " + errno_str(errno));
    }
    t0_ = Clock::now();
    inc_->start(t0_);
    double next_tick = 1.0;
    epoll_event evs[256];
    while (finished_ < flows_.size()) {
        while (timed_next_ < timed_.size() && timed_[timed_next_].first <= now())
            release(timed_[timed_next_++].second);
        const double t = now();
        if (o_.timeout_s > 0 && t >= o_.timeout_s) {
            res_.timed_out = true;
            res_.errors.push_back(fmt::format("timed out after {} s", o_.timeout_s));
            break;
        }
        if (running_ == 0 && timed_next_ == timed_.size() && finished_ < flows_.size())
            break; // the rest wait on triggers that will never fire
        if (t >= next_tick) {
            progress();
            next_tick = std::floor(t) + 1;
        }
        double wake = next_tick;
        if (timed_next_ < timed_.size())
            wake = std::min(wake, timed_[timed_next_].first);
        if (o_.timeout_s > 0)
            wake = std::min(wake, o_.timeout_s);
        const int ms = static_cast<int>(std::ceil(std::max(0.0, wake - t) * 1000));
        int n = ::epoll_wait(ep_.get(), evs, 256, ms);
        if (n < 0 && errno != EINTR)
            throw std::runtime_error("epoll_wait: " + errno_str(errno));
        for (int k = 0; k < n; ++k) {
            const Ep &e = *static_cast<Ep *>(evs[k].data.ptr);
            switch (e.kind) {
            case Ep::Listen:
                on_listen(e.idx);
                break;
            case Ep::Send:
                if (flows_[e.idx].fd.get() >= 0)
                    on_send(e.idx, evs[k].events);
                break;
            case Ep::Recv:
                on_recv(e.idx);
                break;
            case Ep::Inc:
                inc_done();
                break;
            }
        }
    }
    for (FlowState &fs : flows_) {
        fs.fd.reset();
        if (fs.res.state != "done" && fs.res.state != "failed" && fs.res.error.empty())
            fs.res.error = fs.res.state == "waiting" ? "never started: its trigger never fired"
                                                     : "did not finish";
        res_.flows.push_back(fs.res);
        res_.job_s = std::max(res_.job_s, fs.res.send_done_s);
    }
    recvs_.clear();
    listen_.clear();
    res_.inc_report = inc_->finish();
    if (res_.inc_flows) {
        res_.aggregation = inc_->kind();
        res_.aggregated = res_.aggregation == "switch";
    }
    if (o_.counters) {
        res_.links = link_bytes(t_, before, read_counters(t_, o_.prefix));
        for (const LinkBytes &l : res_.links)
            res_.tiers[l.tier] += l.a_to_b + l.b_to_a;
    }
    return std::move(res_);
}

} // namespace

ReplayResult replay(const Matrix &m, const topo::Topology &t, const ReplayOptions &o,
                    std::unique_ptr<IncPath> inc) {
    return Replayer(m, t, o, std::move(inc)).run();
}

} // namespace incxdp::cm
