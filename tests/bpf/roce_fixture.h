// SPDX-License-Identifier: BSD-2-Clause
// The RoCEv2 path of the switch object under bpf_prog_test_run_opts: a job
// of kind ROCE_TREE with its RC connections installed straight into private
// maps, frames built byte by byte from docs/PROTOCOLS.md §3, and their ICRC
// computed with zlib's crc32 over the masked pseudo header (independently of
// bpf/lib/icrc.h, which is what is under test).
#pragma once

#include "../common/frames.h"
#include "../common/percpu.h"
#include "incxdp_switch.skel.h"

#include <incxdp/xdp_frags.h>

#include <incxdp/maps.h>
#include <incxdp/roce.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <arpa/inet.h>
#include <linux/bpf.h>
#include <memory>
#include <net/if.h>
#include <optional>
#include <string>
#include <unistd.h>

namespace incxdp::test::roce {

constexpr uint32_t kJob = 7;
constexpr uint32_t kPoolBase = 10;
constexpr uint32_t kPoolSize = 4; // a power of two, as the RoCE path wants
constexpr uint32_t kLo = 1;       // bpf_prog_test_run's default ingress device

// Offsets in a RoCEv2 frame (docs/PROTOCOLS.md §3).
constexpr size_t kBth = kL4, kWord = kBth + 12, kPayloadImm = kWord + 4;

// This switch, its hosts (children) and its parent switch.
inline Endpoint switch_ep() {
    return {{0x02, 0x49, 0x58, 0x00, 0x00, 0x00}, 0x0a4d00fe, INCXDP_ROCE_UDP_PORT};
}
inline Endpoint host_ep(uint16_t r) {
    return {{0x02, 0x49, 0x58, 0x01, uint8_t(r), 0x00}, 0x0a4d0001u + r, uint16_t(0xc000 + r)};
}
inline Endpoint parent_ep() {
    return {{0x02, 0x49, 0x58, 0x02, 0x00, 0x00}, 0x0a4d01fe, 0xc100};
}
// The switch's address on the parent link, and its source port there.
inline Endpoint switch_up_ep() {
    return {{0x02, 0x49, 0x58, 0x00, 0x00, 0x01}, 0x0a4d01fd, 0xc200};
}

// QPNs and PSN bases of the child connections (rank r), the parent's.
// child_qpn: ours, the destination QPN of the host's frames; host_qpn: the
// host's, the destination QPN of ours.
inline uint32_t child_qpn(uint16_t r) {
    return 0x100 + r;
}
inline uint32_t host_qpn(uint16_t r) {
    return 0x200 + r;
}
inline uint32_t child_rx_base(uint16_t r) {
    return 1000 + 100 * r;
}
inline uint32_t child_tx_base(uint16_t r) {
    return 5000 + 100 * r;
}
constexpr uint32_t kParentConnQpn = 0x300; // ours on the parent link
constexpr uint32_t kParentQpn = 0x400;     // the parent's
constexpr uint32_t kParentRxBase = 7000, kParentTxBase = 9000;

inline uint32_t imm(uint16_t dest, uint8_t prim, uint8_t op, uint8_t dtype = ROCE_DTYPE_INT32) {
    return roce_imm_make(dest, prim, op, dtype);
}
inline uint32_t allreduce(uint8_t op) {
    return imm(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, op);
}

// One RoCEv2 frame's fields. word is the ImmDt (*_IMM opcodes) or the AETH (ACK).
struct RoceFields {
    uint8_t opcode = ROCE_OP_SEND_ONLY_IMM;
    uint32_t dqpn = 0;
    uint32_t psn = 0;
    bool ackreq = false;
    uint32_t word = 0;
    std::vector<int32_t> vals;
    uint8_t flags = 0;
};

inline bool has_word(uint8_t opcode) {
    return opcode == ROCE_OP_ACK || roce_opcode_has_imm(opcode);
}

// ICRC per docs/PROTOCOLS.md §3 with zlib: 8 x 0xFF, the frame from the IPv4 header on
// up to the ICRC with TOS, TTL, IP checksum, UDP checksum and BTH resv8 set to ones.
inline uint32_t icrc_ref(const Bytes &f) {
    if (f.size() < kBth + 12 + 4)
        return 0;
    Bytes m(8, 0xff);
    m.insert(m.end(), f.begin() + kEth, f.end() - 4);
    const size_t ip = 8, udp = ip + 20, bth = udp + 8;
    m[ip + 1] = 0xff;
    m[ip + 8] = 0xff;
    m[ip + 10] = m[ip + 11] = 0xff;
    m[udp + 6] = m[udp + 7] = 0xff;
    m[bth + 4] = 0xff;
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, m.data(), static_cast<uInt>(m.size()));
    return uint32_t(crc);
}

// zlib's CRC-32 of everything after the BTH up to the ICRC: what a
// multicast template carries in the ICRC's place (bpf/lib/icrc.h).
inline uint32_t tail_crc(const Bytes &f) {
    const size_t from = kEth + 20 + 8 + 12;
    return uint32_t(crc32(0, f.data() + from, uInt(f.size() - from - 4)));
}

inline uint32_t icrc_in(const Bytes &f) // stored little-endian
{
    size_t n = f.size();
    return uint32_t(f[n - 4]) | uint32_t(f[n - 3]) << 8 | uint32_t(f[n - 2]) << 16 |
           uint32_t(f[n - 1]) << 24;
}

inline void set_icrc(Bytes &f) {
    uint32_t c = icrc_ref(f);
    for (size_t i = 0; i < 4; i++)
        f[f.size() - 4 + i] = uint8_t(c >> (8 * i));
}

inline Bytes roce_frame(const Endpoint &src, const Endpoint &dst, const RoceFields &r) {
    Bytes p;
    p.push_back(r.opcode);
    p.push_back(r.flags);
    put16(p, ROCE_PKEY_DEFAULT);
    put32(p, r.dqpn & ROCE_QPN_MASK);
    put32(p, (r.ackreq ? ROCE_BTH_ACKREQ : 0) | (r.psn & ROCE_PSN_MASK));
    if (has_word(r.opcode))
        put32(p, r.word);
    for (int32_t v : r.vals)
        put32(p, uint32_t(v));
    put32(p, 0); // ICRC
    Endpoint to = dst;
    to.port = INCXDP_ROCE_UDP_PORT; // the source port is the sender's choice
    Bytes f = udp_frame(src, to, p);
    set_icrc(f);
    return f;
}

// A frame the switch sent, read back.
struct Out {
    uint8_t opcode = 0;
    uint32_t dqpn = 0, psn = 0, word = 0;
    bool ackreq = false;
    std::vector<int32_t> vals;
};

inline Out parse_out(const Bytes &f) {
    Out o;
    if (f.size() < kWord + 8)
        return o;
    o.opcode = f[kBth];
    o.dqpn = get32(f, kBth + 4) & ROCE_QPN_MASK;
    o.ackreq = get32(f, kBth + 8) & ROCE_BTH_ACKREQ;
    o.psn = get32(f, kBth + 8) & ROCE_PSN_MASK;
    o.word = get32(f, kWord);
    for (size_t off = kPayloadImm; off + 4 + 4 <= f.size(); off += 4)
        o.vals.push_back(int32_t(get32(f, off)));
    return o;
}

// base, base + step, ... wrapping at 32 bits.
inline std::vector<int32_t> ramp(size_t n, int32_t base, int32_t step = 1) {
    std::vector<int32_t> v(n);
    for (size_t i = 0; i < n; i++)
        v[i] = int32_t(uint32_t(base) + uint32_t(i) * uint32_t(step));
    return v;
}

struct RunResult {
    int verdict = -1;
    Bytes out;
    int stat = -1; // the one ingress verdict counter that grew
};

class RoceEngineTest : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "loading BPF programs needs root";
        skel_ = incxdp_switch__open();
        ASSERT_NE(skel_, nullptr) << "open incxdp_switch: " << strerror(errno);
        // Private, unpinned maps: the test must not touch a running engine.
        bpf_map *m;
        bpf_object__for_each_map(m, skel_->obj) bpf_map__set_pin_path(m, nullptr);
        bpf_map__set_max_entries(skel_->maps.incxdp_slots, 64);
        // As `incxdp load` in driver mode: frames above one buffer come in fragments.
        ASSERT_EQ(set_xdp_frags({skel_->progs.incxdp_ingress, skel_->progs.incxdp_egress_rewrite}, true), 0);
        ASSERT_EQ(incxdp_switch__load(skel_), 0) << "load incxdp_switch: " << strerror(errno);
        prog_fd_ = bpf_program__fd(skel_->progs.incxdp_ingress);
        // The parent's port in the devmap: bpf_redirect_map() to a port
        // looks it up at once (a broadcast does not).
        uint32_t key = kLo;
        bpf_devmap_val v{};
        v.ifindex = kLo;
        ASSERT_EQ(bpf_map_update_elem(bpf_map__fd(skel_->maps.incxdp_ports), &key, &v, BPF_ANY), 0)
            << strerror(errno);
    }

    void TearDown() override {
        if (skel_)
            incxdp_switch__destroy(skel_);
    }

    int fd(bpf_map *m) { return bpf_map__fd(m); }

    // A switch with `fanin` host children (rank r on child bit r, strict),
    // below a parent switch unless it is the root.
    void install(uint32_t fanin, bool root, uint32_t max_elems = ROCE_MAX_ELEMS,
                 uint32_t pool_size = kPoolSize) {
        incxdp_job j{};
        j.active = 1;
        j.nworkers = fanin;
        j.pool_base = kPoolBase;
        j.pool_size = pool_size;
        j.max_elems = max_elems;
        j.switch_ip = htonl(switch_ep().ip);
        j.kind = INCXDP_JOB_ROCE_TREE;
        uint32_t id = kJob;
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_jobs), &id, &j, BPF_ANY), 0);
        for (uint16_t r = 0; r < fanin; r++)
            add_child(r);
        if (!root)
            add_parent();
    }

    incxdp_roce_conn child_conn(uint16_t r) {
        incxdp_roce_conn c{};
        c.job = kJob;
        c.role = INCXDP_ROCE_CHILD;
        c.strict = 1;
        c.child = r;
        c.ifindex = kLo;
        auto peer = host_ep(r), own = switch_ep();
        std::memcpy(c.peer_mac, peer.mac.data(), 6);
        std::memcpy(c.own_mac, own.mac.data(), 6);
        c.peer_ip = htonl(peer.ip);
        c.own_ip = htonl(own.ip);
        c.peer_qpn = host_qpn(r);
        c.rx_base = child_rx_base(r);
        c.tx_base = child_tx_base(r);
        c.udp_sport = htons(uint16_t(0xd000 + r));
        c.subtree_ranks = 1ull << r;
        c.epsn = c.rx_base;
        return c;
    }

    // What `incxdp rules set-qpn` does to host r's connection.
    void make_rc_device(uint16_t r) {
        incxdp_roce_conn c = conn(child_qpn(r));
        c.rc_device = 1;
        put_conn(child_qpn(r), c);
    }

    void put_conn(uint32_t qpn, const incxdp_roce_conn &c) {
        incxdp_roce_conn_key k{qpn};
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_roce_conns), &k, &c, BPF_ANY), 0)
            << strerror(errno);
    }

    void add_child(uint16_t r) { put_conn(child_qpn(r), child_conn(r)); }

    void add_parent() {
        incxdp_roce_conn c{};
        c.job = kJob;
        c.role = INCXDP_ROCE_PARENT;
        c.strict = 0;
        c.ifindex = kLo;
        auto peer = parent_ep(), own = switch_up_ep();
        std::memcpy(c.peer_mac, peer.mac.data(), 6);
        std::memcpy(c.own_mac, own.mac.data(), 6);
        c.peer_ip = htonl(peer.ip);
        c.own_ip = htonl(own.ip);
        c.peer_qpn = kParentQpn;
        c.rx_base = kParentRxBase;
        c.tx_base = kParentTxBase;
        c.udp_sport = htons(own.port);
        c.epsn = c.rx_base;
        put_conn(kParentConnQpn, c);
        // The job's link to its parent, as `incxdp rules apply` writes it.
        incxdp_parent p{};
        p.ifindex = c.ifindex;
        std::memcpy(p.dst_mac, c.peer_mac, 6);
        std::memcpy(p.src_mac, c.own_mac, 6);
        p.dst_ip = c.peer_ip;
        p.src_ip = c.own_ip;
        p.src_port = c.udp_sport;
        p.dst_port = htons(INCXDP_ROCE_UDP_PORT);
        p.qpn = kParentConnQpn;
        uint32_t id = kJob;
        ASSERT_EQ(bpf_map_update_elem(fd(skel_->maps.incxdp_parents), &id, &p, BPF_ANY), 0)
            << strerror(errno);
    }

    incxdp_roce_conn conn(uint32_t qpn) {
        incxdp_roce_conn c{};
        incxdp_roce_conn_key k{qpn};
        EXPECT_EQ(bpf_map_lookup_elem(fd(skel_->maps.incxdp_roce_conns), &k, &c), 0);
        return c;
    }

    // A contribution of host r for packet index idx.
    Bytes from_host(uint16_t r, uint32_t idx, uint32_t word, const std::vector<int32_t> &vals,
                    bool ackreq = false, uint8_t opcode = ROCE_OP_SEND_ONLY_IMM) {
        RoceFields f;
        f.opcode = opcode;
        f.dqpn = child_qpn(r);
        f.psn = child_rx_base(r) + idx;
        f.ackreq = ackreq;
        f.word = word;
        f.vals = vals;
        return roce_frame(host_ep(r), switch_ep(), f);
    }

    Bytes from_parent(uint32_t idx, uint32_t word, const std::vector<int32_t> &vals) {
        RoceFields f;
        f.dqpn = kParentConnQpn;
        f.psn = kParentRxBase + idx;
        f.word = word;
        f.vals = vals;
        return roce_frame(parent_ep(), switch_up_ep(), f);
    }

    std::vector<uint64_t> counters() {
        std::vector<uint64_t> out(INCXDP_STAT_MAX);
        for (uint32_t k = 0; k < INCXDP_STAT_MAX; k++)
            out[k] = percpu_sum(fd(skel_->maps.incxdp_stats), k);
        return out;
    }

    uint64_t stat(incxdp_stat s) { return counters()[s]; }

    // Runs one frame as if it arrived on `ifindex`, and checks that exactly
    // one ingress verdict counter grew, by one (docs/ROCE.md §3). With
    // `linear` the buffer's linear part holds only the first `linear` bytes
    // and the rest arrives in fragments, as from a NIC whose receive
    // buffers are smaller than the frame.
    RunResult run(const Bytes &frame, uint32_t ifindex = kLo, size_t linear = 0) {
        RunResult r;
        auto before = counters();
        r.out.resize(std::max<size_t>(4096, frame.size()));
        xdp_md ctx{}; // data 0 .. data_end: the linear part, no metadata
        ctx.data_end = static_cast<__u32>(linear ? linear : frame.size());
        ctx.ingress_ifindex = ifindex;
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = r.out.data(),
                    .data_size_in = static_cast<__u32>(frame.size()),
                    .data_size_out = static_cast<__u32>(r.out.size()), .ctx_in = &ctx,
                    .ctx_size_in = sizeof(ctx), .repeat = 1);
        int err = bpf_prog_test_run_opts(prog_fd_, &opts);
        EXPECT_EQ(err, 0) << "bpf_prog_test_run_opts: " << strerror(errno);
        r.verdict = static_cast<int>(opts.retval);
        r.out.resize(opts.data_size_out);
        auto after = counters();
        uint64_t grown = 0;
        for (int s = 0; s < INCXDP_STAT_INGRESS_VERDICTS; s++)
            if (after[s] != before[s]) {
                grown += after[s] - before[s];
                r.stat = s;
            }
        EXPECT_EQ(grown, 1u) << "every frame ends in exactly one ingress verdict counter";
        return r;
    }

    // Nanoseconds per run of `frame`, bpf_prog_test_run's own timing.
    double time_ns(const Bytes &frame, uint32_t repeat) {
        Bytes out(4096);
        LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = frame.data(), .data_out = out.data(),
                    .data_size_in = static_cast<__u32>(frame.size()),
                    .data_size_out = static_cast<__u32>(out.size()),
                    .repeat = static_cast<int>(repeat));
        EXPECT_EQ(bpf_prog_test_run_opts(prog_fd_, &opts), 0) << strerror(errno);
        return double(opts.duration);
    }

    incxdp_slot slot(uint32_t window_slot) {
        auto s = std::make_unique<incxdp_slot>();
        uint32_t idx = kPoolBase + window_slot;
        EXPECT_EQ(bpf_map_lookup_elem(fd(skel_->maps.incxdp_slots), &idx, s.get()), 0);
        return *s;
    }

    incxdp_switch *skel_ = nullptr;
    int prog_fd_ = -1;
};

// The addresses and lengths every frame the switch sends to `peer` from
// `own` must have (IPv4 ID 0, DF, TTL 64, a right UDP checksum and ICRC).
inline void expect_sent(const Bytes &f, const Endpoint &own, const Endpoint &peer, uint16_t sport,
                        size_t len) {
    ASSERT_EQ(f.size(), len);
    EXPECT_TRUE(std::equal(peer.mac.begin(), peer.mac.end(), f.begin())) << "dst MAC";
    EXPECT_TRUE(std::equal(own.mac.begin(), own.mac.end(), f.begin() + 6)) << "src MAC";
    EXPECT_EQ(get16(f, 12), 0x0800);
    EXPECT_EQ(f[kEth], 0x45);
    EXPECT_EQ(get16(f, kEth + 2), len - kEth) << "IPv4 total length";
    EXPECT_EQ(get16(f, kEth + 4), 0) << "IPv4 ID";
    EXPECT_EQ(get16(f, kEth + 6), 0x4000) << "DF";
    EXPECT_EQ(f[kEth + 8], 64) << "TTL";
    EXPECT_EQ(f[kEth + 9], 17);
    EXPECT_EQ(ip_checksum(&f[kEth]), 0) << "IPv4 checksum";
    EXPECT_EQ(get32(f, kEth + 12), own.ip);
    EXPECT_EQ(get32(f, kEth + 16), peer.ip);
    EXPECT_EQ(get16(f, kEth + 20), sport) << "UDP source port";
    EXPECT_EQ(get16(f, kEth + 22), INCXDP_ROCE_UDP_PORT);
    EXPECT_EQ(get16(f, kEth + 24), len - kEth - 20) << "UDP length";
    EXPECT_NE(get16(f, kEth + 26), 0) << "UDP checksum (every addressed frame has one)";
    EXPECT_EQ(udp_sum(f), 0xffff) << "UDP checksum";
    EXPECT_EQ(f[kBth + 1], 0) << "BTH flags";
    EXPECT_EQ(get16(f, kBth + 2), ROCE_PKEY_DEFAULT);
    EXPECT_EQ(f[kBth + 4], 0) << "BTH resv8";
    EXPECT_EQ(icrc_in(f), icrc_ref(f)) << "ICRC (zlib)";
}

} // namespace incxdp::test::roce
