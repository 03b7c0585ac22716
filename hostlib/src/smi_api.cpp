// SPDX-License-Identifier: BSD-2-Clause
// SMI's C API over the runtime: channels, lanes, collectives, start-up.
#include "smi_runtime.h"

#include <fmt/format.h>

#include <cfloat>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>

using incxdp::smi::RecvLane;
using incxdp::smi::RxStream;
using incxdp::smi::SendLane;
using incxdp::smi::stream_key;
using incxdp::smi::wait_for;

namespace {

[[noreturn]] void die(const char *fn, const std::string &why) {
    std::fprintf(stderr, "SMI: %s: %s\n", fn, why.c_str());
    std::exit(1);
}

incxdp_smi_runtime &rt_of(SMI_Comm comm, const char *fn) {
    if (!comm.rt)
        die(fn, "communicator not initialised (call SMI_Init first)");
    return *comm.rt;
}

void check_rank(incxdp_smi_runtime &rt, int r, const char *what, const char *fn) {
    if (r < 0 || r >= rt.size)
        die(fn, fmt::format("{} {} is not a rank (0..{})", what, r, rt.size - 1));
}

// A new channel. A negative asynchronicity degree asks for eager mode with
// |ad| packets of buffer; 0 means the default; INCXDP_SMI_EAGER=1 makes
// every channel eager.
incxdp_smi_chan *new_chan(incxdp_smi_runtime &rt, SMI_Datatype type, int port, int ad,
                          const char *fn) {
    if (incxdp::smi::elem_size(type) == 0)
        die(fn, fmt::format("unknown datatype {}", static_cast<int>(type)));
    if (port < 0 || port >= incxdp::smi::kPorts)
        die(fn, fmt::format("port {} is not in 0..{}", port, incxdp::smi::kPorts - 1));
    bool eager = rt.eager_default || ad < 0;
    int packets = ad == 0 ? incxdp::smi::kDefaultAsyncDegree : std::abs(ad);
    packets = std::min<int>(packets, static_cast<int>(incxdp::smi::kStreamCapMsgs));
    std::lock_guard<std::mutex> g(rt.mu);
    incxdp_smi_chan &c = rt.chans.emplace_back();
    c.type = type;
    c.size = incxdp::smi::elem_size(type);
    c.per_msg = incxdp::smi::elems_per_msg(type);
    c.budget = static_cast<int64_t>(packets) * c.per_msg;
    // Credits go back in chunks of B/8, but never so large that the
    // elements a receiver holds back leave the sender less than a message.
    c.grant_chunk = std::max<int64_t>(1, std::min<int64_t>(c.budget / 8, c.budget - c.per_msg + 1));
    c.eager = eager;
    return &c;
}

void add_tx(incxdp_smi_runtime &rt, incxdp_smi_chan *c, int dst, int port, int op) {
    std::lock_guard<std::mutex> g(rt.mu);
    SendLane l;
    l.dst = dst;
    l.port = port;
    l.op = op;
    l.msg.src = static_cast<uint8_t>(rt.rank);
    l.msg.dst = static_cast<uint8_t>(dst);
    l.msg.port = static_cast<uint8_t>(port);
    c->tx.push_back(l);
    // Credits belong to the stream and persist across its channels, so a
    // receiver never holds more than one buffer of it (docs/SMI.md).
    incxdp::smi::TxStream &s = rt.tx[stream_key(dst, port, op)];
    if (!s.opened) {
        s.opened = true;
        s.credits += c->budget;
    }
}

void add_rx(incxdp_smi_chan *c, int src, int port, int op) {
    c->rx.push_back({src, port, op});
}

// Under rt.mu: the lane's message goes into the peer's batch; credits it
// reserved and did not fill go back to the stream.
void send_msg(incxdp_smi_runtime &rt, incxdp_smi_chan &c, SendLane &l, bool now) {
    l.msg.elems_and_op =
        incxdp_smi_pack(static_cast<unsigned>(l.fill), static_cast<unsigned>(l.op));
    incxdp::smi::queue_msg(rt, l.dst, l.msg, now);
    if (!c.eager)
        rt.tx[stream_key(l.dst, l.port, l.op)].credits += l.reserved - l.fill;
    std::memset(l.msg.data, 0, sizeof(l.msg.data));
    l.fill = 0;
    l.reserved = 0;
}

// n elements on a lane, under one lock: whole runs copied at once. A
// rendezvous message takes a whole message's credits before its first
// element, so the stream's message boundaries stay where SMI puts them
// (every per_msg elements, or a flush) and a message never waits half
// filled for credits its receiver cannot return before it gets it. `last`
// ends the channel and `flush` sends the partial message (both: the peer's
// batch goes now).
void push_lane(incxdp_smi_runtime &rt, incxdp_smi_chan &c, SendLane &l, const void *data, size_t n,
               bool last, bool flush) {
    const auto *src = static_cast<const uint8_t *>(data);
    std::unique_lock<std::mutex> lk(rt.mu);
    incxdp::smi::TxStream &s = rt.tx[stream_key(l.dst, l.port, l.op)];
    incxdp::smi::Peer &p = rt.peers[l.dst];
    for (size_t done = 0; done < n;) {
        const bool starts = !c.eager && l.fill == 0;
        wait_for(rt, lk, [&] {
            return (!starts || s.credits >= c.per_msg) &&
                   p.unacked.size() < incxdp::smi::kMaxUnackedFrames;
        });
        if (starts) {
            s.credits -= c.per_msg;
            l.reserved = c.per_msg;
        }
        const size_t k = std::min<size_t>(n - done, static_cast<size_t>(c.per_msg - l.fill));
        std::memcpy(l.msg.data + l.fill * c.size, src + done * c.size, k * c.size);
        l.fill += static_cast<int>(k);
        done += k;
        const bool end = done == n && (last || flush);
        if (l.fill == c.per_msg || end)
            send_msg(rt, c, l, end);
    }
}

// n elements of a lane, under one lock; credits go back every grant_chunk.
void pop_lane(incxdp_smi_runtime &rt, incxdp_smi_chan &c, RecvLane &l, void *data, size_t n) {
    auto *dst = static_cast<uint8_t *>(data);
    std::unique_lock<std::mutex> lk(rt.mu);
    RxStream &s = rt.rx[stream_key(l.src, l.port, l.op)];
    for (size_t done = 0; done < n;) {
        wait_for(rt, lk, [&] { return !s.msgs.empty(); });
        const incxdp_smi_msg &m = s.msgs.front();
        const size_t in_msg = incxdp_smi_elems(m.elems_and_op);
        const size_t k = std::min(n - done, in_msg > s.front_pos ? in_msg - s.front_pos : 0);
        std::memcpy(dst + done * c.size, m.data + s.front_pos * c.size, k * c.size);
        // A message without elements (none is sent) still counts as one.
        const size_t took = std::max<size_t>(k, 1);
        done += took;
        s.front_pos += took;
        if (s.front_pos >= in_msg) {
            s.msgs.pop_front();
            s.front_pos = 0;
            rt.rx_msgs--;
        }
        if (c.eager)
            continue;
        s.ungranted += took;
        if (s.ungranted >= static_cast<uint64_t>(c.grant_chunk)) {
            incxdp_smi_msg g{};
            uint32_t credits = static_cast<uint32_t>(s.ungranted);
            std::memcpy(g.data, &credits, 4);
            g.data[4] = static_cast<uint8_t>(l.op);
            g.src = static_cast<uint8_t>(rt.rank);
            g.dst = static_cast<uint8_t>(l.src);
            g.port = static_cast<uint8_t>(l.port);
            g.elems_and_op = incxdp_smi_pack(0, INCXDP_SMI_OP_SYNCH);
            s.ungranted = 0;
            incxdp::smi::queue_msg(rt, l.src, g, true);
        }
    }
}

template <class T> T identity(SMI_Op op) {
    if (op == SMI_ADD)
        return T(0);
    return op == SMI_MIN ? std::numeric_limits<T>::max() : std::numeric_limits<T>::lowest();
}

template <class T> void fold_t(SMI_Op op, void *acc, const void *x) {
    T a, b;
    std::memcpy(&a, acc, sizeof(T));
    std::memcpy(&b, x, sizeof(T));
    if (op == SMI_ADD)
        a = static_cast<T>(a + b);
    else if (op == SMI_MAX)
        a = b > a ? b : a;
    else
        a = b < a ? b : a;
    std::memcpy(acc, &a, sizeof(T));
}

template <class T> void init_t(SMI_Op op, void *acc) {
    T v = identity<T>(op);
    std::memcpy(acc, &v, sizeof(T));
}

void fold(SMI_Datatype t, SMI_Op op, void *acc, const void *x) {
    switch (t) {
    case SMI_INT:
        return fold_t<int32_t>(op, acc, x);
    case SMI_FLOAT:
        return fold_t<float>(op, acc, x);
    case SMI_DOUBLE:
        return fold_t<double>(op, acc, x);
    case SMI_CHAR:
        return fold_t<char>(op, acc, x);
    case SMI_SHORT:
        return fold_t<int16_t>(op, acc, x);
    }
}

void init_acc(SMI_Datatype t, SMI_Op op, void *acc) {
    switch (t) {
    case SMI_INT:
        return init_t<int32_t>(op, acc);
    case SMI_FLOAT:
        return init_t<float>(op, acc);
    case SMI_DOUBLE:
        return init_t<double>(op, acc);
    case SMI_CHAR:
        return init_t<char>(op, acc);
    case SMI_SHORT:
        return init_t<int16_t>(op, acc);
    }
}

incxdp_smi_chan &chan_of(incxdp_smi_chan *c, const char *fn) {
    if (!c)
        die(fn, "channel not opened");
    return *c;
}

void check_calls(incxdp_smi_chan &c, uint64_t limit, const char *fn, uint64_t n = 1) {
    if (c.calls + n > limit)
        die(fn, n == 1 ? fmt::format("channel already moved its {} elements", limit)
                       : fmt::format("{} more elements exceed the channel's {} ({} moved)", n,
                                     limit, c.calls));
}

incxdp_smi_runtime *g_rt = nullptr; // SMI_Comm is a value; one runtime per process

} // namespace

extern "C" {

SMI_Comm SMI_Init(int *, char ***) {
    const char *rank = std::getenv("INCXDP_SMI_RANK");
    const char *topo = std::getenv("INCXDP_SMI_TOPOLOGY");
    if (!rank || !topo)
        die("SMI_Init",
            "INCXDP_SMI_RANK and INCXDP_SMI_TOPOLOGY are not set: start the program with "
            "`incxdp smi run TOPOLOGY -- PROGRAM`");
    if (g_rt)
        die("SMI_Init", "called twice");
    const char *pin_dir = std::getenv("INCXDP_SMI_PIN_DIR");
    if (!pin_dir || !*pin_dir)
        die("SMI_Init", "INCXDP_SMI_PIN_DIR (the rank's relay) is not set: start the program with "
                        "`incxdp smi run TOPOLOGY -- PROGRAM`");
    const char *eager = std::getenv("INCXDP_SMI_EAGER");
    g_rt = new incxdp_smi_runtime;
    try {
        incxdp::smi::start(*g_rt, std::atoi(rank), topo, pin_dir,
                           eager && std::strcmp(eager, "1") == 0);
    } catch (const std::exception &e) {
        die("SMI_Init", e.what());
    }
    return {g_rt->rank, g_rt->size, g_rt};
}

void SMI_Finalize(SMI_Comm comm) {
    incxdp_smi_runtime &rt = rt_of(comm, "SMI_Finalize");
    try {
        incxdp::smi::finish(rt);
    } catch (const std::exception &e) {
        die("SMI_Finalize", e.what());
    }
    delete g_rt;
    g_rt = nullptr;
}

int SMI_Comm_rank(SMI_Comm comm) {
    return comm.rank;
}
int SMI_Comm_size(SMI_Comm comm) {
    return comm.size;
}

SMI_Channel SMI_Open_send_channel_ad(int count, SMI_Datatype type, int destination, int port,
                                     SMI_Comm comm, int ad) {
    incxdp_smi_runtime &rt = rt_of(comm, "SMI_Open_send_channel");
    check_rank(rt, destination, "destination", "SMI_Open_send_channel");
    incxdp_smi_chan *c = new_chan(rt, type, port, ad, "SMI_Open_send_channel");
    add_tx(rt, c, destination, port, INCXDP_SMI_OP_SEND);
    return {c, count, type, destination, port};
}
SMI_Channel SMI_Open_send_channel(int count, SMI_Datatype type, int destination, int port,
                                  SMI_Comm comm) {
    return SMI_Open_send_channel_ad(count, type, destination, port, comm, 0);
}

SMI_Channel SMI_Open_receive_channel_ad(int count, SMI_Datatype type, int source, int port,
                                        SMI_Comm comm, int ad) {
    incxdp_smi_runtime &rt = rt_of(comm, "SMI_Open_receive_channel");
    check_rank(rt, source, "source", "SMI_Open_receive_channel");
    incxdp_smi_chan *c = new_chan(rt, type, port, ad, "SMI_Open_receive_channel");
    add_rx(c, source, port, INCXDP_SMI_OP_SEND);
    return {c, count, type, source, port};
}
SMI_Channel SMI_Open_receive_channel(int count, SMI_Datatype type, int source, int port,
                                     SMI_Comm comm) {
    return SMI_Open_receive_channel_ad(count, type, source, port, comm, 0);
}

void SMI_Push_flush(SMI_Channel *chan, void *data, int immediate) {
    incxdp_smi_chan &c = chan_of(chan->impl, "SMI_Push");
    if (c.tx.empty())
        die("SMI_Push", "not a send channel");
    check_calls(c, static_cast<uint64_t>(chan->count), "SMI_Push");
    const bool last = ++c.calls == static_cast<uint64_t>(chan->count);
    push_lane(*g_rt, c, c.tx[0], data, 1, last, immediate != 0);
}
void SMI_Push(SMI_Channel *chan, void *data) {
    SMI_Push_flush(chan, data, 0);
}

void SMI_Pop(SMI_Channel *chan, void *data) {
    incxdp_smi_chan &c = chan_of(chan->impl, "SMI_Pop");
    if (c.rx.empty())
        die("SMI_Pop", "not a receive channel");
    check_calls(c, static_cast<uint64_t>(chan->count), "SMI_Pop");
    c.calls++;
    pop_lane(*g_rt, c, c.rx[0], data, 1);
}

void incxdp_smi_push_n(SMI_Channel *chan, const void *data, size_t n) {
    incxdp_smi_chan &c = chan_of(chan->impl, "incxdp_smi_push_n");
    if (c.tx.empty())
        die("incxdp_smi_push_n", "not a send channel");
    check_calls(c, static_cast<uint64_t>(chan->count), "incxdp_smi_push_n", n);
    if (n == 0)
        return;
    c.calls += n;
    push_lane(*g_rt, c, c.tx[0], data, n, c.calls == static_cast<uint64_t>(chan->count), false);
}
void incxdp_smi_pop_n(SMI_Channel *chan, void *data, size_t n) {
    incxdp_smi_chan &c = chan_of(chan->impl, "incxdp_smi_pop_n");
    if (c.rx.empty())
        die("incxdp_smi_pop_n", "not a receive channel");
    check_calls(c, static_cast<uint64_t>(chan->count), "incxdp_smi_pop_n", n);
    if (n == 0)
        return;
    c.calls += n;
    pop_lane(*g_rt, c, c.rx[0], data, n);
}

SMI_BChannel SMI_Open_bcast_channel_ad(int count, SMI_Datatype type, int port, int root,
                                       SMI_Comm comm, int ad) {
    incxdp_smi_runtime &rt = rt_of(comm, "SMI_Open_bcast_channel");
    check_rank(rt, root, "root", "SMI_Open_bcast_channel");
    incxdp_smi_chan *c = new_chan(rt, type, port, ad, "SMI_Open_bcast_channel");
    if (rt.rank == root) {
        for (int r = 0; r < rt.size; r++)
            if (r != root)
                add_tx(rt, c, r, port, INCXDP_SMI_OP_BROADCAST);
    } else {
        add_rx(c, root, port, INCXDP_SMI_OP_BROADCAST);
    }
    return {c, count, type, port, root};
}
SMI_BChannel SMI_Open_bcast_channel(int count, SMI_Datatype type, int port, int root,
                                    SMI_Comm comm) {
    return SMI_Open_bcast_channel_ad(count, type, port, root, comm, 0);
}

void SMI_Bcast(SMI_BChannel *chan, void *data) {
    incxdp_smi_chan &c = chan_of(chan->impl, "SMI_Bcast");
    check_calls(c, static_cast<uint64_t>(chan->count), "SMI_Bcast");
    const bool last = ++c.calls == static_cast<uint64_t>(chan->count);
    if (g_rt->rank == chan->root) {
        for (SendLane &l : c.tx)
            push_lane(*g_rt, c, l, data, 1, last, false);
    } else {
        pop_lane(*g_rt, c, c.rx[0], data, 1);
    }
}

SMI_RChannel SMI_Open_reduce_channel_ad(int count, SMI_Datatype type, SMI_Op op, int port, int root,
                                        SMI_Comm comm, int ad) {
    incxdp_smi_runtime &rt = rt_of(comm, "SMI_Open_reduce_channel");
    check_rank(rt, root, "root", "SMI_Open_reduce_channel");
    if (op != SMI_ADD && op != SMI_MAX && op != SMI_MIN)
        die("SMI_Open_reduce_channel", fmt::format("unknown op {}", static_cast<int>(op)));
    incxdp_smi_chan *c = new_chan(rt, type, port, ad, "SMI_Open_reduce_channel");
    if (rt.rank == root) {
        for (int r = 0; r < rt.size; r++)
            if (r != root)
                add_rx(c, r, port, INCXDP_SMI_OP_REDUCE);
    } else {
        add_tx(rt, c, root, port, INCXDP_SMI_OP_REDUCE);
    }
    return {c, count, type, op, port, root};
}
SMI_RChannel SMI_Open_reduce_channel(int count, SMI_Datatype type, SMI_Op op, int port, int root,
                                     SMI_Comm comm) {
    return SMI_Open_reduce_channel_ad(count, type, op, port, root, comm, 0);
}

void SMI_Reduce(SMI_RChannel *chan, void *data_snd, void *data_rcv) {
    incxdp_smi_chan &c = chan_of(chan->impl, "SMI_Reduce");
    check_calls(c, static_cast<uint64_t>(chan->count), "SMI_Reduce");
    const bool last = ++c.calls == static_cast<uint64_t>(chan->count);
    if (g_rt->rank != chan->root) {
        push_lane(*g_rt, c, c.tx[0], data_snd, 1, last, false);
        return;
    }
    alignas(8) uint8_t acc[8], x[8];
    init_acc(c.type, chan->op, acc);
    fold(c.type, chan->op, acc, data_snd);
    for (RecvLane &l : c.rx) {
        pop_lane(*g_rt, c, l, x, 1);
        fold(c.type, chan->op, acc, x);
    }
    std::memcpy(data_rcv, acc, c.size);
}

SMI_ScatterChannel SMI_Open_scatter_channel_ad(int send_count, int recv_count, SMI_Datatype type,
                                               int port, int root, SMI_Comm comm, int ad) {
    incxdp_smi_runtime &rt = rt_of(comm, "SMI_Open_scatter_channel");
    check_rank(rt, root, "root", "SMI_Open_scatter_channel");
    incxdp_smi_chan *c = new_chan(rt, type, port, ad, "SMI_Open_scatter_channel");
    if (rt.rank == root) {
        for (int r = 0; r < rt.size; r++) // every rank, the root's lane unused: index = rank
            add_tx(rt, c, r, port, INCXDP_SMI_OP_SCATTER);
    } else {
        add_rx(c, root, port, INCXDP_SMI_OP_SCATTER);
    }
    return {c, send_count, recv_count, type, port, root};
}
SMI_ScatterChannel SMI_Open_scatter_channel(int send_count, int recv_count, SMI_Datatype type,
                                            int port, int root, SMI_Comm comm) {
    return SMI_Open_scatter_channel_ad(send_count, recv_count, type, port, root, comm, 0);
}

void SMI_Scatter(SMI_ScatterChannel *chan, void *data_snd, void *data_rcv) {
    incxdp_smi_chan &c = chan_of(chan->impl, "SMI_Scatter");
    incxdp_smi_runtime &rt = *g_rt;
    if (rt.rank != chan->root) {
        check_calls(c, static_cast<uint64_t>(chan->recv_count), "SMI_Scatter");
        c.calls++;
        pop_lane(rt, c, c.rx[0], data_rcv, 1);
        return;
    }
    const uint64_t per = static_cast<uint64_t>(chan->send_count);
    check_calls(c, per * rt.size, "SMI_Scatter");
    const uint64_t k = c.calls++;
    const int dst = static_cast<int>(k / per);
    if (dst == rt.rank)
        std::memcpy(data_rcv, data_snd, c.size);
    else
        push_lane(rt, c, c.tx[dst], data_snd, 1, k % per == per - 1, false);
}

SMI_GatherChannel SMI_Open_gather_channel_ad(int send_count, int recv_count, SMI_Datatype type,
                                             int port, int root, SMI_Comm comm, int ad) {
    incxdp_smi_runtime &rt = rt_of(comm, "SMI_Open_gather_channel");
    check_rank(rt, root, "root", "SMI_Open_gather_channel");
    incxdp_smi_chan *c = new_chan(rt, type, port, ad, "SMI_Open_gather_channel");
    if (rt.rank == root) {
        for (int r = 0; r < rt.size; r++) // index = rank, the root's unused
            add_rx(c, r, port, INCXDP_SMI_OP_GATHER);
    } else {
        add_tx(rt, c, root, port, INCXDP_SMI_OP_GATHER);
    }
    return {c, send_count, recv_count, type, port, root};
}
SMI_GatherChannel SMI_Open_gather_channel(int send_count, int recv_count, SMI_Datatype type,
                                          int port, int root, SMI_Comm comm) {
    return SMI_Open_gather_channel_ad(send_count, recv_count, type, port, root, comm, 0);
}

void SMI_Gather(SMI_GatherChannel *chan, void *send_data, void *rcv_data) {
    incxdp_smi_chan &c = chan_of(chan->impl, "SMI_Gather");
    incxdp_smi_runtime &rt = *g_rt;
    if (rt.rank != chan->root) {
        check_calls(c, static_cast<uint64_t>(chan->send_count), "SMI_Gather");
        const bool last = ++c.calls == static_cast<uint64_t>(chan->send_count);
        push_lane(rt, c, c.tx[0], send_data, 1, last, false);
        return;
    }
    const uint64_t per = static_cast<uint64_t>(chan->recv_count);
    check_calls(c, per * rt.size, "SMI_Gather");
    const uint64_t k = c.calls++;
    const int src = static_cast<int>(k / per);
    if (src == rt.rank)
        std::memcpy(rcv_data, send_data, c.size);
    else
        pop_lane(rt, c, c.rx[src], rcv_data, 1);
}

int incxdp_smi_hops(SMI_Comm comm, int rank) {
    incxdp_smi_runtime &rt = rt_of(comm, "incxdp_smi_hops");
    check_rank(rt, rank, "rank", "incxdp_smi_hops");
    return rank == rt.rank ? 0 : rt.hops[rank];
}

void incxdp_smi_get_stats(SMI_Comm comm, struct incxdp_smi_stats *out) {
    incxdp_smi_runtime &rt = rt_of(comm, "incxdp_smi_get_stats");
    std::lock_guard<std::mutex> g(rt.mu);
    *out = rt.stats;
}

} // extern "C"
