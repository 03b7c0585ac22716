// SPDX-License-Identifier: BSD-2-Clause
// The p2p endpoint: handshakes, frame dispatch to connections, requests,
// close. The reliability of each connection is mesh_conn.cpp's.
#include "mesh_conn.h"
#include "mesh_link.h"

#include <incxdp/relay.h>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <thread>
#include <unordered_map>

namespace incxdp::mesh {

struct Listen {
    uint32_t id = 0;
    std::deque<Comm *> ready; ///< connected, not yet accepted
};

namespace {

constexpr size_t kRxBatch = 64;
constexpr int kRxRounds = 16; // batches one progress() takes before sending

Clock::duration seconds(double s) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string node_str(uint32_t n) {
    return fmt::format("{:#010x}", n);
}

double env_double(const char *name, double dflt) {
    const char *e = getenv(name);
    if (!e || !*e)
        return dflt;
    char *end = nullptr;
    double v = strtod(e, &end);
    if (end == e || *end || v <= 0)
        throw Error(ErrorKind::InvalidUsage,
                    fmt::format("{}={}: expected a positive number", name, e));
    return v;
}

// The node's link: AF_XDP where the relay can deliver into sockets (else
// a one-line notice and the UDP socket), INCXDP_MESH_AF_XDP=0 the UDP
// socket only.
std::unique_ptr<Link> open_endpoint_link(const std::string &pin_dir) {
    const char *x = getenv("INCXDP_MESH_AF_XDP");
    if (x && strcmp(x, "0") == 0)
        return open_udp_link(pin_dir);
    return open_xdp_link(pin_dir, "mesh endpoint");
}

} // namespace

Options Options::from_env() {
    Options o;
    o.pin_dir = default_pin_dir();
    o.timeout_s = env_double("INCXDP_MESH_P2P_TIMEOUT", o.timeout_s);
    o.window = static_cast<uint32_t>(env_double("INCXDP_MESH_P2P_WINDOW", o.window));
    return o;
}

struct Endpoint::Impl {
    Options opts;
    std::unique_ptr<Link> link;
    uint32_t self = 0;
    std::unordered_map<uint32_t, std::unique_ptr<Comm>> conns;
    std::map<uint32_t, std::unique_ptr<Listen>> listens;
    std::map<std::pair<uint32_t, uint32_t>, uint32_t> accepted_by_peer; // (node, its conn) -> ours
    struct Tomb {
        uint32_t peer_node, peer_conn, cum;
        uint8_t path;
    };
    std::unordered_map<uint32_t, Tomb> tombs;
    std::deque<TxFrame> txq;
    uint32_t next_id = 1, next_listen = 0x40000000;
    std::vector<InFrame> rx = std::vector<InFrame>(kRxBatch);

    Impl(std::unique_ptr<Link> l, const Options &o) : opts(o), link(std::move(l)) {
        if (opts.window < 8 || opts.window > 32768)
            throw Error(ErrorKind::InvalidUsage,
                        fmt::format("mesh p2p: window {} outside 8..32768 segments", opts.window));
        self = link->self_node();
        // Ids unlike a previous process's on this node: its frames may still arrive.
        next_id = std::random_device{}() | 1;
    }

    uint32_t new_id() {
        uint32_t id;
        do
            id = next_id++;
        while (id == 0 || conns.count(id) || tombs.count(id));
        return id;
    }

    ConnEnv env(const Comm &c) {
        size_t seg = opts.max_segment ? opts.max_segment
                                      : link->max_payload(c.peer_node) - sizeof(incxdp_p2p_hdr);
        return ConnEnv{opts, seg, [this](TxFrame &&f) { txq.push_back(std::move(f)); }};
    }

    std::string describe(const Comm &c) {
        return fmt::format("node {} {}", node_str(c.peer_node),
                           link->path(c.peer_node, c.path, true).describe());
    }

    void send_ctrl(uint32_t dst_node, uint8_t path, uint8_t type, uint32_t dst_conn,
                   uint32_t src_conn, uint32_t seq = 0, uint32_t msg_id = 0) {
        TxFrame f;
        f.dst_node = dst_node;
        f.path = path;
        f.hdr.type = type;
        f.hdr.window = static_cast<uint16_t>(std::min<uint32_t>(opts.window, 0xffff));
        f.hdr.dst_conn = dst_conn;
        f.hdr.src_conn = src_conn;
        f.hdr.seq = seq;
        f.hdr.msg_id = msg_id;
        txq.push_back(std::move(f));
    }

    void flush() {
        if (txq.empty())
            return;
        std::vector<incxdp_p2p_hdr> hdrs(txq.size());
        std::vector<OutFrame> out(txq.size());
        size_t i = 0;
        for (auto &f : txq) {
            hdrs[i] = encode(f.hdr);
            out[i] = OutFrame{f.dst_node,
                              INCXDP_RELAY_KIND_P2P,
                              f.path,
                              f.hdr.src_conn,
                              &hdrs[i],
                              sizeof hdrs[i],
                              f.extra.empty() ? f.body : f.extra.data(),
                              f.extra.empty() ? f.body_len : f.extra.size()};
            i++;
        }
        // What the link cannot take now is lost like a dropped frame: the
        // timers resend it (never later, when a DATA body may be freed).
        link->send(out);
        txq.clear();
    }

    void finish_close(Comm &c) {
        tombs[c.id] = Tomb{c.peer_node, c.peer_conn, c.rcv_nxt, c.path};
        accepted_by_peer.erase({c.peer_node, c.peer_conn});
        conns.erase(c.id);
    }

    void on_connect(const InFrame &f, const P2pHeader &h) {
        auto l = listens.find(h.dst_conn);
        if (l == listens.end())
            return; // not listening (yet): the connector retries
        auto key = std::make_pair(f.src_node, h.src_conn);
        auto it = accepted_by_peer.find(key);
        Comm *c;
        if (it != accepted_by_peer.end() && conns.count(it->second)) {
            c = conns[it->second].get(); // our ACCEPT was lost
        } else {
            auto nc = std::make_unique<Comm>();
            c = nc.get();
            c->id = new_id();
            c->peer_node = f.src_node;
            c->peer_conn = h.src_conn;
            c->listen_id = h.dst_conn;
            c->peer_window = h.window;
            c->path = f.path; // answer on the way the connector chose
            c->state = Comm::State::Established;
            c->stats.peer_node = f.src_node;
            conn_init(*c, opts.window, opts.rto_s, Clock::now());
            conns[c->id] = std::move(nc);
            accepted_by_peer[key] = c->id;
            l->second->ready.push_back(c);
        }
        send_ctrl(c->peer_node, c->path, INCXDP_P2P_ACCEPT, c->peer_conn, c->id);
    }

    void establish(Comm &c, const P2pHeader &h) {
        c.peer_conn = h.src_conn;
        if (h.type == INCXDP_P2P_ACCEPT)
            c.peer_window = h.window;
        c.state = Comm::State::Established;
        c.last_progress = Clock::now();
    }

    void on_frame(const InFrame &f) {
        if (f.kind != INCXDP_RELAY_KIND_P2P)
            return;
        auto h = decode({f.data, f.len});
        if (!h)
            return;
        std::span<const uint8_t> payload(f.data + sizeof(incxdp_p2p_hdr),
                                         f.len - sizeof(incxdp_p2p_hdr));
        if (h->type == INCXDP_P2P_CONNECT)
            return on_connect(f, *h);
        auto it = conns.find(h->dst_conn);
        if (it == conns.end()) {
            auto t = tombs.find(h->dst_conn);
            if (t != tombs.end()) {
                if (h->type == INCXDP_P2P_DATA)
                    send_ctrl(f.src_node, t->second.path, INCXDP_P2P_ACK, h->src_conn, h->dst_conn,
                              t->second.cum);
                else if (h->type == INCXDP_P2P_CLOSE && h->msg_id != INCXDP_P2P_CLOSE_ANSWER)
                    send_ctrl(f.src_node, t->second.path, INCXDP_P2P_CLOSE, h->src_conn,
                              h->dst_conn, t->second.cum, INCXDP_P2P_CLOSE_ANSWER);
            } else if (h->type == INCXDP_P2P_DATA) {
                send_ctrl(f.src_node, f.path, INCXDP_P2P_RESET, h->src_conn, h->dst_conn, 0,
                          INCXDP_P2P_RESET_UNKNOWN_CONN);
            }
            return;
        }
        Comm &c = *it->second;
        if (c.peer_node != f.src_node || c.state == Comm::State::Failed)
            return;
        if (c.state == Comm::State::Connecting) {
            if (h->type == INCXDP_P2P_ACCEPT || h->type == INCXDP_P2P_DATA ||
                h->type == INCXDP_P2P_ACK)
                establish(c, *h); // DATA/ACK: the ACCEPT was lost, the peer went on
            else if (h->type != INCXDP_P2P_RESET)
                return;
        }
        if (c.peer_conn != h->src_conn && h->type != INCXDP_P2P_RESET)
            return; // a previous connection's
        auto now = Clock::now();
        switch (h->type) {
        case INCXDP_P2P_DATA:
            conn_on_data(c, *h, payload, now);
            break;
        case INCXDP_P2P_ACK:
            conn_on_ack(c, *h, payload, now, env(c));
            break;
        case INCXDP_P2P_CLOSE: {
            P2pHeader ack = *h;
            ack.msg_id = 0;
            conn_on_ack(c, ack, {}, now, env(c));
            c.peer_closed = true;
            if (c.state == Comm::State::Closing) {
                if (h->msg_id != INCXDP_P2P_CLOSE_ANSWER)
                    send_ctrl(c.peer_node, c.path, INCXDP_P2P_CLOSE, c.peer_conn, c.id, c.rcv_nxt,
                              INCXDP_P2P_CLOSE_ANSWER);
                finish_close(c);
            }
            break;
        }
        case INCXDP_P2P_RESET:
            if (h->src_conn == c.peer_conn || c.peer_conn == 0)
                conn_fail(c, ErrorKind::System,
                          fmt::format("node {} reset the connection: it has no connection {} "
                                      "(did its process restart?)",
                                      node_str(c.peer_node), h->src_conn));
            break;
        default:
            break;
        }
    }

    void progress() {
        for (int round = 0; round < kRxRounds; round++) {
            size_t n = link->recv(rx);
            for (size_t i = 0; i < n; i++)
                on_frame(rx[i]);
            if (n < rx.size())
                break;
        }
        auto now = Clock::now();
        std::vector<uint32_t> done_closing;
        for (auto &[id, cp] : conns) {
            Comm &c = *cp;
            if (c.state == Comm::State::Connecting) {
                if (now - c.started > seconds(opts.timeout_s)) {
                    conn_fail(c, ErrorKind::System,
                              fmt::format("connect to {} (listen id {}): no answer for {:.1f} s",
                                          describe(c), c.listen_id, opts.timeout_s));
                } else if (now - c.last_ctrl > seconds(opts.rto_s * (1 + c.backoffs))) {
                    c.backoffs = std::min<uint32_t>(c.backoffs + 1, 15);
                    if (c.backoffs % 3 == 0)
                        c.path++; // the other way round a ring, if there is one
                    link->path(c.peer_node, c.path, true);
                    c.last_ctrl = now;
                    send_ctrl(c.peer_node, c.path, INCXDP_P2P_CONNECT, c.listen_id, c.id);
                }
                continue;
            }
            bool timed_out = false;
            conn_pump(
                c, now, env(c), [&] { return describe(c); }, &timed_out);
            if (timed_out) {
                PathInfo p = link->path(c.peer_node, c.path, true);
                // Two timeouts in a row: the path may be cut; try the other.
                if (c.backoffs >= 2 && p.nnexthops > 1)
                    c.path++;
            }
            if (c.state == Comm::State::Closing) {
                if (c.snd_una == c.snd_nxt && c.peer_closed) {
                    done_closing.push_back(id);
                } else if (now - c.last_ctrl > seconds(opts.rto_s * 4)) {
                    c.last_ctrl = now;
                    send_ctrl(c.peer_node, c.path, INCXDP_P2P_CLOSE, c.peer_conn, c.id, c.rcv_nxt);
                }
            }
        }
        for (uint32_t id : done_closing)
            finish_close(*conns[id]);
        flush();
    }

    Comm &comm(Comm *c, const char *what) {
        if (!c || !conns.count(c->id) || conns[c->id].get() != c)
            throw Error(ErrorKind::Internal, fmt::format("mesh p2p {}: not an open comm", what));
        if (c->state == Comm::State::Failed)
            throw Error(c->error_kind, fmt::format("mesh p2p: {}", c->error));
        if (c->state != Comm::State::Established)
            throw Error(ErrorKind::Internal,
                        fmt::format("mesh p2p {}: comm not established", what));
        return *c;
    }
};

Endpoint::Endpoint(const Options &o)
    : impl_(std::make_unique<Impl>(
          open_endpoint_link(o.pin_dir.empty() ? default_pin_dir() : o.pin_dir), o)) {}

Endpoint::Endpoint(std::unique_ptr<Link> link, const Options &o)
    : impl_(std::make_unique<Impl>(std::move(link), o)) {}

Endpoint::~Endpoint() {
    // Closed connections wait (a while) for the peer's CLOSE, acking its
    // last data meanwhile, so that the peer does not time out on a lost ACK.
    auto end = Clock::now() + seconds(impl_->opts.linger_s);
    auto closing = [&] {
        for (auto &[id, c] : impl_->conns)
            if (c->state == Comm::State::Closing)
                return true;
        return false;
    };
    try {
        while (closing() && Clock::now() < end)
            wait(1);
    } catch (...) {
    }
}

uint32_t Endpoint::node_id() const {
    return impl_->self;
}

Listen *Endpoint::listen(uint32_t listen_id) {
    if (listen_id == 0)
        while (impl_->listens.count(listen_id = impl_->next_listen++) || listen_id == 0)
            ;
    if (impl_->listens.count(listen_id))
        throw Error(
            ErrorKind::InvalidUsage,
            fmt::format("mesh p2p: listen id {} is already in use on this node", listen_id));
    auto l = std::make_unique<Listen>();
    l->id = listen_id;
    Listen *p = l.get();
    impl_->listens[listen_id] = std::move(l);
    return p;
}

Handle Endpoint::make_handle(std::span<const uint32_t> addrs, uint32_t listen_id) {
    incxdp_p2p_handle h{};
    std::vector<uint32_t> sorted(addrs.begin(), addrs.end());
    std::sort(sorted.begin(), sorted.end());
    if (sorted.size() > INCXDP_P2P_HANDLE_MAX_ADDRS)
        throw Error(ErrorKind::InvalidUsage,
                    fmt::format("mesh p2p: {} addresses, a handle holds {}", sorted.size(),
                                INCXDP_P2P_HANDLE_MAX_ADDRS));
    h.magic = htonl(INCXDP_P2P_HANDLE_MAGIC);
    h.node = htonl(node_id_of(sorted));
    h.listen_id = htonl(listen_id);
    h.naddrs = static_cast<uint8_t>(sorted.size());
    h.version = INCXDP_P2P_VERSION;
    for (size_t i = 0; i < sorted.size(); i++)
        h.addrs[i] = htonl(sorted[i]);
    Handle out;
    memcpy(out.data(), &h, sizeof h);
    return out;
}

uint32_t Endpoint::handle_node(const Handle &hb) {
    incxdp_p2p_handle h;
    memcpy(&h, hb.data(), sizeof h);
    if (ntohl(h.magic) != INCXDP_P2P_HANDLE_MAGIC)
        throw Error(ErrorKind::InvalidUsage, "mesh p2p: not a mesh p2p handle (bad magic)");
    return ntohl(h.node);
}

Handle Endpoint::handle(const Listen *l) const {
    Handle out = make_handle(impl_->link->addresses(), l->id);
    // The node id the relay knows this node by (the daemon's), if it differs.
    uint32_t node = htonl(impl_->self);
    memcpy(out.data() + offsetof(incxdp_p2p_handle, node), &node, sizeof node);
    return out;
}

Comm *Endpoint::connect(Handle &hb) {
    incxdp_p2p_handle h;
    memcpy(&h, hb.data(), sizeof h);
    uint32_t peer = handle_node(hb);
    Comm *c = nullptr;
    if (h.local_cookie) {
        auto it = impl_->conns.find(static_cast<uint32_t>(h.local_cookie));
        if (it == impl_->conns.end())
            throw Error(ErrorKind::Internal, "mesh p2p connect: the handle's connection is gone");
        c = it->second.get();
    } else {
        if (peer == impl_->self)
            throw Error(ErrorKind::InvalidUsage, "mesh p2p connect: the handle is this node's own");
        PathInfo p = impl_->link->path(peer, 0, true);
        if (p.found && p.hops > 1 && !impl_->link->relay_enabled())
            check_reachable(peer);
        auto nc = std::make_unique<Comm>();
        c = nc.get();
        c->id = impl_->new_id();
        c->peer_node = peer;
        c->listen_id = ntohl(h.listen_id);
        c->path = static_cast<uint8_t>(c->id & 1); // connections alternate the two ways
        c->stats.peer_node = peer;
        conn_init(*c, impl_->opts.window, impl_->opts.rto_s, Clock::now());
        impl_->conns[c->id] = std::move(nc);
        h.local_cookie = c->id;
        memcpy(hb.data(), &h, sizeof h);
        impl_->send_ctrl(peer, c->path, INCXDP_P2P_CONNECT, c->listen_id, c->id);
        impl_->flush();
    }
    impl_->progress();
    if (c->state == Comm::State::Failed) {
        std::string why = c->error;
        ErrorKind k = c->error_kind;
        impl_->conns.erase(c->id);
        throw Error(k, "mesh p2p: " + why);
    }
    if (c->state != Comm::State::Established)
        return nullptr;
    h.local_cookie = 0; // the handle may be used again for another connection
    memcpy(hb.data(), &h, sizeof h);
    return c;
}

Comm *Endpoint::accept(Listen *l) {
    if (!l || !impl_->listens.count(l->id) || impl_->listens[l->id].get() != l)
        throw Error(ErrorKind::Internal, "mesh p2p accept: not an open listener");
    impl_->progress();
    while (!l->ready.empty()) {
        Comm *c = l->ready.front();
        l->ready.pop_front();
        if (impl_->conns.count(c->id)) {
            c->accepted = true;
            return c;
        }
    }
    return nullptr;
}

Request *Endpoint::isend(Comm *cp, const void *data, size_t size, int tag) {
    Comm &c = impl_->comm(cp, "isend");
    if (c.sends.size() >= impl_->opts.max_requests)
        return nullptr;
    auto r = std::make_unique<Request>();
    r->kind = Request::Kind::Send;
    r->comm = &c;
    r->data = static_cast<const uint8_t *>(data);
    r->size = size;
    r->tag = tag;
    r->msg_id = c.next_msg++;
    c.unsent.push_back(r.get());
    c.sends.push_back(r.get());
    c.pool.push_back(std::move(r));
    return c.pool.back().get();
}

Request *Endpoint::irecv(Comm *cp, int n, void *const *data, const size_t *sizes, const int *tags) {
    Comm &c = impl_->comm(cp, "irecv");
    if (n < 1 || n > kMaxRecvs)
        throw Error(ErrorKind::InvalidUsage,
                    fmt::format("mesh p2p irecv: {} buffers, 1..{} allowed", n, kMaxRecvs));
    if (c.recvs.size() >= impl_->opts.max_requests)
        return nullptr;
    auto r = std::make_unique<Request>();
    r->kind = Request::Kind::Recv;
    r->comm = &c;
    r->n = n;
    for (int i = 0; i < n; i++) {
        r->bufs[i] = data[i];
        r->caps[i] = sizes[i];
        r->tags[i] = tags ? tags[i] : 0;
    }
    Request *p = r.get();
    c.pool.push_back(std::move(r));
    conn_post_recv(c, p);
    return p;
}

bool Endpoint::test(Request *r, size_t *sizes) {
    if (!r || !r->comm)
        throw Error(ErrorKind::Internal, "mesh p2p test: null request");
    Comm *c = r->comm;
    auto it = impl_->conns.find(c->id);
    if (it == impl_->conns.end() || it->second.get() != c)
        throw Error(ErrorKind::Internal, "mesh p2p test: the request's comm is closed");
    if (!r->done)
        impl_->progress();
    if (!r->done) {
        if (c->state == Comm::State::Failed)
            throw Error(c->error_kind, "mesh p2p: " + c->error);
        return false;
    }
    if (sizes) {
        if (r->kind == Request::Kind::Send)
            sizes[0] = r->size;
        else
            for (int i = 0; i < r->n; i++)
                sizes[i] = r->len[i];
    }
    auto &pool = c->pool;
    pool.erase(std::find_if(pool.begin(), pool.end(), [r](auto &p) { return p.get() == r; }));
    return true;
}

void Endpoint::close(Comm *c) {
    if (!c || !impl_->conns.count(c->id))
        return;
    if (c->state != Comm::State::Established) {
        impl_->conns.erase(c->id);
        return;
    }
    c->state = Comm::State::Closing;
    c->last_ctrl = Clock::now();
    impl_->send_ctrl(c->peer_node, c->path, INCXDP_P2P_CLOSE, c->peer_conn, c->id, c->rcv_nxt);
    if (c->peer_closed && c->snd_una == c->snd_nxt)
        impl_->finish_close(*c);
    impl_->flush();
}

void Endpoint::close(Listen *l) {
    if (l)
        impl_->listens.erase(l->id);
}

void Endpoint::progress() {
    impl_->progress();
}

void Endpoint::wait(int max_ms) {
    impl_->progress();
    bool busy = false;
    for (auto &[id, c] : impl_->conns)
        if (!c->unsent.empty() && c->snd_nxt - c->snd_una < c->inflight.size())
            busy = true;
    if (busy || max_ms <= 0)
        return;
    // Every socket recv() reads: the AF_XDP ones and the UDP one.
    std::vector<pollfd> fds;
    for (int fd : impl_->link->poll_fds())
        fds.push_back({fd, POLLIN, 0});
    if (fds.empty()) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        return;
    }
    ::poll(fds.data(), fds.size(), std::min(max_ms, 2)); // timers need a look every few ms
}

uint32_t Endpoint::peer_node(const Comm *c) const {
    return c->peer_node;
}

void Endpoint::check_reachable(uint32_t node, std::string *desc) {
    PathInfo p = impl_->link->path(node, 0, true);
    if (desc)
        *desc = p.describe();
    if (!p.found)
        throw Error(ErrorKind::System,
                    fmt::format("mesh p2p: no route to node {} (is `incxdp mesh run` running on "
                                "every node, and has it converged?)",
                                node_str(node)));
    if (p.hops > 1 && !impl_->link->relay_enabled())
        throw Error(ErrorKind::System,
                    fmt::format("mesh p2p: node {} is {} hops away and relaying is off (incxdp "
                                "mesh run --relay off): only neighbours are reachable",
                                node_str(node), p.hops));
}

size_t Endpoint::open_comms() const {
    return impl_->conns.size();
}

CommStats Endpoint::stats(const Comm *c) const {
    CommStats s = c->stats;
    s.path = c->path;
    s.path_desc = impl_->link->path(c->peer_node, c->path).describe();
    return s;
}

} // namespace incxdp::mesh
