// SPDX-License-Identifier: BSD-2-Clause
#include <incxdp/chaos.h>
#include "gen.h"

#include <incxdp/proto.h>
#include <incxdp/switchml.h>

#include <algorithm>
#include <array>
#include <climits>

namespace incxdp::fuzz {
namespace {

using test::get16;
using test::kEth;
using test::kL4;
using test::NativeFields;

uint64_t splitmix64(uint64_t &x) {
    uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t rotl(uint64_t x, int k) {
    return (x << k) | (x >> (64 - k));
}

void put_at(Bytes &b, size_t off, uint32_t v, size_t width) {
    for (size_t i = 0; i < width && off + i < b.size(); i++)
        b[off + i] = uint8_t(v >> (8 * (width - 1 - i)));
}

uint32_t get_at(const Bytes &b, size_t off, size_t width) {
    uint32_t v = 0;
    for (size_t i = 0; i < width; i++)
        v = v << 8 | (off + i < b.size() ? b[off + i] : 0);
    return v;
}

// A set's (round, chunk, op, dtype, nelems), i.e. what a contribution must
// carry to join the set; SwitchML can only say round = chunk = 0, SUM, INT32.
struct Tag {
    uint32_t round = 0, chunk = 0;
    uint8_t op = 0, dtype = 0;
    uint16_t nelems = 32;
    bool switchml_ok() const {
        return round == 0 && chunk == 0 && op == INCXDP_OP_SUM && dtype == INCXDP_DTYPE_INT32 &&
               nelems >= 32 && nelems <= 4096 && (nelems & (nelems - 1)) == 0;
    }
};

Tag tag_of(const incxdp_slot_set &s) {
    Tag t;
    t.round = s.round;
    t.chunk = s.chunk;
    t.op = s.op;
    t.dtype = s.dtype;
    t.nelems = s.nelems;
    return t;
}

int size_code(uint16_t nelems) {
    int c = 0;
    while ((32u << c) < nelems)
        c++;
    return c;
}

// RoCEv2 ICRC (docs/PROTOCOLS.md §3): CRC-32 over 8 bytes of 0xFF and the frame
// from the IPv4 header on, with the variant fields masked to ones.
uint32_t roce_icrc(const Bytes &f) {
    Bytes m(8, 0xff);
    m.insert(m.end(), f.begin() + kEth, f.end() - 4);
    const size_t ip = 8, udp = ip + 20, bth = udp + 8;
    m[ip + 1] = 0xff;               // TOS
    m[ip + 8] = 0xff;               // TTL
    m[ip + 10] = m[ip + 11] = 0xff; // header checksum
    m[udp + 6] = m[udp + 7] = 0xff; // UDP checksum
    m[bth + 4] = 0xff;              // BTH resv8
    static const auto table = [] {
        std::array<uint32_t, 256> t{};
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
            t[i] = c;
        }
        return t;
    }();
    uint32_t crc = 0xffffffffu;
    for (uint8_t b : m)
        crc = (crc >> 8) ^ table[(crc ^ b) & 0xff];
    return ~crc;
}

} // namespace

const char *kind_name(Kind k) {
    static const char *names[] = {"random",         "random_l4",      "guided",
                                  "roce",           "mutated_guided", "mutated_switchml",
                                  "mutated_native", "mutated_roce"};
    static_assert(std::size(names) == size_t(Kind::Count));
    return names[size_t(k)];
}

Rng::Rng(uint64_t seed) {
    for (auto &s : s_)
        s = splitmix64(seed);
}

uint64_t Rng::next() {
    const uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
}

uint32_t Rng::below(uint32_t n) {
    return uint32_t((next() >> 32) * n >> 32); // Lemire's multiply, bias < 2^-32
}

std::vector<int32_t> Traffic::values(size_t n) {
    std::vector<int32_t> v(n);
    const uint32_t style = rng_.below(4);
    for (auto &x : v) {
        switch (style == 3 ? rng_.below(3) : style) {
        case 0: // small, so sums stay readable in a report
            x = int32_t(rng_.below(201)) - 100;
            break;
        case 1: { // the edges where wrapping and signed max/min differ
            static const int32_t edges[] = {INT32_MIN, INT32_MIN + 1, -1,       0,
                                            1,         INT32_MAX - 1, INT32_MAX};
            x = edges[rng_.below(7)];
            break;
        }
        default:
            x = int32_t(uint32_t(rng_.next()));
        }
    }
    return v;
}

Endpoint Traffic::random_sender() {
    static const std::vector<SenderDef> senders = registered_senders();
    Endpoint ep = rng_.pick(senders).ep;
    switch (rng_.below(8)) { // mostly registered; else one field off, or nobody
    case 0:
        ep.mac[rng_.below(6)] ^= uint8_t(1u << rng_.below(8));
        break;
    case 1:
        ep.ip ^= 1u << rng_.below(32);
        break;
    case 2:
        ep.port = uint16_t(rng_.next());
        break;
    case 3:
        for (auto &b : ep.mac)
            b = rng_.byte();
        ep.ip = uint32_t(rng_.next());
        ep.port = uint16_t(rng_.next());
        break;
    default:
        break;
    }
    return ep;
}

Bytes Traffic::random_bytes() {
    size_t hi = rng_.percent(50)   ? 128
                : rng_.percent(70) ? 1500
                : rng_.percent(90) ? kMaxFrame
                                   : kMaxJumboFrame;
    Bytes b(rng_.range(kMinFrame, uint32_t(hi)));
    for (auto &x : b)
        x = rng_.byte();
    return b;
}

Bytes Traffic::random_l4() {
    uint16_t dport = rng_.percent(50)   ? uint16_t(SWITCHML_UDP_PORT_MIN + rng_.below(16))
                     : rng_.percent(80) ? kNativePort
                                        : kRocePort;
    Bytes payload(rng_.below(rng_.percent(80) ? 300 : 1200));
    for (auto &x : payload)
        x = rng_.byte();
    if (!payload.empty() && rng_.percent(50)) // a plausible first byte gets past the first check
        payload[0] = dport == kNativePort ? INCXDP_MAGIC : uint8_t(rng_.below(8));
    if (payload.size() > 1 && dport == kNativePort && rng_.percent(50))
        payload[1] = INCXDP_VERSION << 4;
    return test::udp_frame(random_sender(), switch_ep(dport), payload);
}

Bytes Traffic::roce_frame(uint8_t opcode, uint32_t imm, const std::vector<int32_t> &vals) {
    Bytes p;
    p.push_back(opcode);
    p.push_back(0);                       // SE, M, PadCnt, TVer
    test::put16(p, 0xffff);               // P_Key
    test::put32(p, rng_.below(1u << 24)); // resv8 = 0, DestQP
    test::put32(p, rng_.below(1u << 24)); // A = 0, PSN
    if (opcode == 0x03 || opcode == 0x05)
        test::put32(p, imm);
    for (int32_t v : vals)
        test::put32(p, uint32_t(v));
    test::put32(p, 0); // ICRC, below
    Endpoint src = random_sender();
    src.port = uint16_t(0xc000 + rng_.below(0x4000));
    Bytes f = test::udp_frame(src, switch_ep(kRocePort), p);
    uint32_t icrc = roce_icrc(f);
    for (size_t i = 0; i < 4; i++) // stored little-endian
        f[f.size() - 4 + i] = uint8_t(icrc >> (8 * i));
    if (rng_.percent(50)) // as hostlib sends them: checked instead of the ICRC
        test::set_udp_csum(f);
    return f;
}

Bytes Traffic::random_roce() {
    // ImmDt: dest_rank:16 primitive:2 op:2 dtype:4 reserved:8
    // (One call per statement: the order of operands is unspecified in C++.)
    uint32_t imm = rng_.below(8) << 16;
    imm |= rng_.below(3) << 14;
    imm |= rng_.below(4) << 12;
    imm |= rng_.below(2) << 8;
    uint8_t opcode = rng_.percent(50) ? 0x04 : 0x05;
    size_t n = rng_.percent(50) ? 256 : rng_.range(1, 256); // 1024 B in the reference setup
    return roce_frame(opcode, imm, values(n));
}

Bytes Traffic::random_switchml() {
    uint16_t pool = rng_.percent(70)
                        ? uint16_t(rng_.below(10) | (rng_.percent(50) ? SWITCHML_POOL_SET_BIT : 0))
                        : uint16_t(rng_.next());
    uint8_t size = uint8_t(rng_.percent(90) ? rng_.below(4) : rng_.below(8));
    size_t n = std::min<size_t>(32u << size, 900);
    const uint8_t job = rng_.byte();
    const uint32_t tsi = uint32_t(rng_.next());
    const int8_t e0 = int8_t(rng_.byte()), e1 = int8_t(rng_.byte());
    auto p = test::switchml_payload(SWITCHML_MSG_UPDATE, size, job, tsi, pool, e0, e1, values(n));
    uint16_t dport = uint16_t(SWITCHML_UDP_PORT_MIN + rng_.below(16));
    return test::udp_frame(random_sender(), switch_ep(dport), p);
}

Bytes Traffic::random_native() {
    NativeFields f;
    const JobDef &j = kJobs[rng_.below(uint32_t(kJobs.size()))];
    f.op = uint8_t(rng_.below(3));
    f.dtype = uint8_t(rng_.below(2));
    f.job = rng_.percent(80) ? j.id : uint32_t(rng_.next());
    f.round = rng_.below(4);
    f.chunk = rng_.below(4);
    f.rank = uint16_t(rng_.below(6));
    f.nworkers = uint16_t(rng_.percent(80) ? j.nworkers : rng_.below(6));
    f.slot = uint16_t(rng_.below(10) | (rng_.percent(50) ? INCXDP_SLOT_SET_BIT : 0));
    f.exp = int8_t(rng_.byte());
    f.tsi = uint32_t(rng_.next());
    size_t n = INCXDP_ELEM_QUANTUM * rng_.range(0, INCXDP_MAX_ELEMS / INCXDP_ELEM_QUANTUM);
    Endpoint src = rng_.percent(50) ? worker_ep(j, f.rank % j.nworkers) : random_sender();
    return test::udp_frame(src, switch_ep(kNativePort), test::native_payload(f, values(n)));
}

// A contribution a well-behaved worker (or a slightly confused one) would
// send, chosen from the model's view of one slot of one job.
Bytes Traffic::guided() {
    const JobDef &j = rng_.percent(75) ? kJobs[0] : kJobs[1];
    uint16_t slot = uint16_t(rng_.below(j.pool_size));
    const incxdp_slot &s = model_.slot(j.pool_base + slot);
    if (rng_.percent(2)) // just outside the pool
        slot = uint16_t(j.pool_size + rng_.below(3));

    auto ranks = [&](uint32_t set, bool in) {
        std::vector<uint16_t> v;
        for (uint16_t r = 0; r < j.nworkers; r++)
            if (bool(s.set[set].bitmap & (1u << r)) == in)
                v.push_back(r);
        return v;
    };
    auto new_tag = [&] {
        Tag t;
        if (rng_.percent(55)) { // SwitchML-shaped
            uint32_t max_code = uint32_t(size_code(uint16_t(std::min<uint32_t>(j.max_elems, 256))));
            uint32_t code = rng_.percent(95) ? rng_.below(max_code + 1) : rng_.below(5);
            t.nelems = uint16_t(32u << code);
        } else {
            t.op = uint8_t(rng_.below(3));
            t.dtype = uint8_t(rng_.below(2));
            t.round = rng_.percent(90) ? next_round_++ : rng_.below(3);
            t.chunk = rng_.below(64);
            uint32_t blocks =
                (rng_.percent(97) ? j.max_elems : INCXDP_MAX_ELEMS) / INCXDP_ELEM_QUANTUM;
            t.nelems = uint16_t(INCXDP_ELEM_QUANTUM * rng_.range(1, blocks));
        }
        return t;
    };
    auto frame = [&](uint16_t rank, uint8_t set, const Tag &t) {
        Endpoint src = worker_ep(j, rank);
        std::vector<int32_t> vals = values(t.nelems);
        uint16_t idx = uint16_t(slot | (set ? SWITCHML_POOL_SET_BIT : 0));
        if (t.switchml_ok() && t.nelems <= 512 &&
            rng_.percent(75)) { // 512: size code 4, a spec gap
            const uint32_t tsi = uint32_t(rng_.next());
            const int8_t e0 = int8_t(rng_.range(0, 20) - 10), e1 = int8_t(rng_.range(0, 20) - 10);
            auto p = test::switchml_payload(SWITCHML_MSG_UPDATE, uint8_t(size_code(t.nelems)),
                                            uint8_t(j.id), tsi, idx, e0, e1, vals);
            return test::udp_frame(src, switch_ep(uint16_t(SWITCHML_UDP_PORT_MIN + rng_.below(16))),
                                   p);
        }
        NativeFields f;
        f.op = t.op;
        f.dtype = t.dtype;
        f.job = j.id;
        f.round = t.round;
        f.chunk = t.chunk;
        f.rank = rank;
        f.nworkers = uint16_t(rng_.percent(20) ? 0 : j.nworkers);
        f.slot = idx;
        f.exp = int8_t(rng_.range(0, 40) - 20);
        f.tsi = uint32_t(rng_.next());
        if (t.nelems > INCXDP_MAX_ELEMS || t.nelems % INCXDP_ELEM_QUANTUM)
            vals.resize(INCXDP_ELEM_QUANTUM); // not expressible natively: some other tag
        return test::udp_frame(src, switch_ep(kNativePort), test::native_payload(f, vals));
    };

    const uint32_t r = rng_.below(100);
    int busy = -1;
    for (uint32_t set = 0; set < 2; set++)
        if (s.set[set].remaining && (busy < 0 || rng_.percent(50)))
            busy = int(set);
    if (busy >= 0 && r < 75) {
        const uint8_t set = uint8_t(busy);
        auto missing = ranks(set, false), in = ranks(set, true);
        if (r < 62 && !missing.empty()) // the next contribution: consumed or completing
            return frame(rng_.pick(missing), set, tag_of(s.set[set]));
        if (r < 70 && !in.empty()) // a retransmission before the set is complete
            return frame(rng_.pick(in), set, tag_of(s.set[set]));
        // Another chunk while this one is in progress.
        const uint16_t rank =
            missing.empty() ? uint16_t(rng_.below(j.nworkers)) : rng_.pick(missing);
        return frame(rank, set, new_tag());
    }
    // Idle or complete sets: the next round goes to the set that did not
    // complete last (SwitchML's shadow-set alternation), or a retransmission.
    uint8_t set = s.set[0].rounds > s.set[1].rounds ? 1 : 0;
    if (rng_.percent(10))
        set ^= 1;
    auto missing = ranks(set, false);
    if (r < 85 && !missing.empty()) {
        const uint16_t rank = rng_.pick(missing);
        return frame(rank, set, new_tag());
    }
    uint8_t rset = rng_.percent(50) ? set : uint8_t(set ^ 1);
    auto in = ranks(rset, true);
    const uint16_t rank = in.empty() ? uint16_t(rng_.below(j.nworkers)) : rng_.pick(in);
    // A late retransmission: its result is unicast back, or it names an older chunk.
    const Tag t = !in.empty() && rng_.percent(85) ? tag_of(s.set[rset]) : new_tag();
    return frame(rank, rset, t);
}

void Traffic::mutate(Bytes &f) {
    const uint32_t ops = rng_.percent(70) ? 1 : rng_.range(2, 5);
    for (uint32_t op = 0; op < ops; op++) {
        const size_t n = f.size();
        const uint16_t dport = n >= kL4 ? get16(f, kEth + 22) : 0;
        const bool sml = dport >= SWITCHML_UDP_PORT_MIN && dport <= SWITCHML_UDP_PORT_MAX;
        switch (rng_.below(11)) {
        case 0: { // bit flip, mostly in the headers
            size_t pos = rng_.percent(70) ? rng_.below(uint32_t(std::min<size_t>(n, kL4 + 32)))
                                          : rng_.below(uint32_t(n));
            f[pos] ^= uint8_t(1u << rng_.below(8));
            break;
        }
        case 1: { // byte set
            static const uint8_t interesting[] = {0x00, 0x01, 0x0f, 0x10, 0x1c, 0x40,
                                                  0x7f, 0x80, 0xbe, 0xef, 0xff};
            size_t pos = rng_.percent(70) ? rng_.below(uint32_t(std::min<size_t>(n, kL4 + 32)))
                                          : rng_.below(uint32_t(n));
            f[pos] =
                rng_.percent(60) ? interesting[rng_.below(std::size(interesting))] : rng_.byte();
            break;
        }
        case 2: { // truncation, often right at a header boundary
            static const size_t cuts[] = {14, 33, 34, 41, 42, 43, 47, 51,
                                          52, 53, 73, 74, 75, 54, 58};
            size_t len = rng_.percent(50)   ? cuts[rng_.below(std::size(cuts))]
                         : rng_.percent(50) ? n - std::min<size_t>(n - kMinFrame, rng_.range(1, 8))
                                            : rng_.range(kMinFrame, uint32_t(n));
            f.resize(std::clamp(len, kMinFrame, n));
            break;
        }
        case 3: { // extension
            size_t add = rng_.range(1, rng_.percent(80) ? 16 : rng_.percent(95) ? 600 : 6000);
            bool zero = rng_.percent(50);
            for (size_t i = 0; i < add && f.size() < kMaxJumboFrame; i++)
                f.push_back(zero ? 0 : rng_.byte());
            break;
        }
        case 4:
        case 5: { // a header field gets a near, small, flipped or random value
            static const std::pair<size_t, size_t> sml_fields[] = {{0, 1}, {1, 1}, {2, 4},
                                                                   {6, 2}, {8, 1}, {9, 1}};
            static const std::pair<size_t, size_t> nat_fields[] = {
                {0, 1},  {1, 1},  {2, 1},  {3, 1},  {4, 4},  {8, 4},  {12, 4}, {16, 2},
                {18, 2}, {20, 2}, {22, 2}, {24, 1}, {25, 1}, {26, 2}, {28, 4}};
            static const std::pair<size_t, size_t> roce_fields[] = {{0, 1}, {1, 1}, {2, 2},
                                                                    {4, 4}, {8, 4}, {12, 4}};
            auto [off, width] = sml ? sml_fields[rng_.below(std::size(sml_fields))]
                                : dport == kRocePort
                                    ? roce_fields[rng_.below(std::size(roce_fields))]
                                    : nat_fields[rng_.below(std::size(nat_fields))];
            off += kL4;
            uint32_t cur = get_at(f, off, width), v;
            switch (rng_.below(7)) {
            case 0:
                v = uint32_t(rng_.next());
                break;
            case 1:
                v = rng_.below(9);
                break;
            case 2:
                v = cur + (rng_.percent(50) ? 1 : uint32_t(-1));
                break;
            case 3:
                v = cur ^ (1u << rng_.below(uint32_t(8 * width)));
                break;
            case 4:
                v = cur + (rng_.percent(50) ? 16 : uint32_t(-16));
                break;
            case 5:
                v = rng_.pick(
                    std::vector<uint32_t>{kJobs[0].id, kJobs[1].id, kInactiveJob, 0x8000, 0x4000});
                break;
            default:
                v = 0xffffffffu;
                break;
            }
            put_at(f, off, v, width);
            break;
        }
        case 6: { // IPv4 total length / UDP length
            size_t off = rng_.percent(50) ? kEth + 2 : kEth + 24;
            if (off + 2 > n)
                break;
            uint32_t cur = get_at(f, off, 2);
            uint32_t consistent = off == kEth + 2 ? uint32_t(n - kEth) : uint32_t(n - kEth - 20);
            static const int deltas[] = {-1, 1, -4, 4, -64, 64};
            uint32_t v = rng_.percent(25)   ? uint32_t(rng_.below(0x10000))
                         : rng_.percent(20) ? rng_.pick(std::vector<uint32_t>{0, 8, 28, 0xffff})
                         : rng_.percent(30) ? consistent
                                            : cur + uint32_t(deltas[rng_.below(std::size(deltas))]);
            put_at(f, off, v, 2);
            break;
        }
        case 7: { // another UDP port
            if (kEth + 24 > n)
                break;
            static const uint16_t ports[] = {0xBEE0, 0xBEEF,    0xBEDF, 0xBEF0,
                                             0xBEF1, kRocePort, 53,     4000};
            uint16_t v = rng_.percent(60)   ? ports[rng_.below(std::size(ports))]
                         : rng_.percent(50) ? uint16_t(SWITCHML_UDP_PORT_MIN + rng_.below(16))
                                            : uint16_t(rng_.next());
            put_at(f, rng_.percent(75) ? kEth + 22 : kEth + 20, v, 2);
            break;
        }
        case 8: { // another sender: registered, half-registered or nobody
            if (kEth + 22 > n)
                break;
            Endpoint ep = random_sender();
            uint32_t which = rng_.below(4); // all, or only MAC / IP / port
            if (which == 0 || which == 1)
                std::copy(ep.mac.begin(), ep.mac.end(), f.begin() + 6);
            if (which == 0 || which == 2)
                put_at(f, kEth + 12, ep.ip, 4);
            if (which == 0 || which == 3)
                put_at(f, kEth + 20, ep.port, 2);
            break;
        }
        case 9: { // Ethernet / IPv4 structure
            if (kEth + 20 > n)
                break;
            switch (rng_.below(5)) {
            case 0:
                put_at(f, 12,
                       rng_.pick(std::vector<uint32_t>{0x86dd, 0x0806, 0x8100, 0x0800,
                                                       rng_.below(0x10000)}),
                       2);
                break;
            case 1:
                f[kEth] = rng_.pick(
                    std::vector<uint8_t>{0x46, 0x44, 0x55, 0x65, 0x4f, 0x45, rng_.byte()});
                break;
            case 2:
                put_at(f, kEth + 6,
                       rng_.pick(std::vector<uint32_t>{0x4000, 0x2000, 0x0001, 0x1fff, 0x8000, 0}),
                       2);
                break;
            case 3:
                f[kEth + 9] = rng_.pick(std::vector<uint8_t>{6, 1, 17, 0, 255});
                break;
            default:
                f[kEth + 8] = rng_.byte();
                break; // TTL: irrelevant to the engine
            }
            break;
        }
        default: { // payload bytes
            if (n <= kL4 + 10)
                break;
            size_t from = rng_.range(uint32_t(kL4 + 10), uint32_t(n - 1));
            size_t len = std::min<size_t>(n - from, rng_.range(1, 64));
            for (size_t i = 0; i < len; i++)
                f[from + i] = rng_.byte();
            break;
        }
        }
    }
}

Bytes Traffic::next(Kind &kind) {
    const uint32_t r = rng_.below(100);
    Bytes f;
    if (r < 8) {
        kind = Kind::Random;
        return random_bytes();
    }
    if (r < 16) {
        kind = Kind::RandomL4;
        return random_l4();
    }
    if (r < 54) {
        kind = Kind::Guided;
        f = guided();
        // Now and then as the chaos hook's detour frames (bpf/lib/chaos_xdp.h):
        // RETURN is the frame itself again, REFLECT goes straight back.
        if (r < 19) {
            uint16_t t = r < 18 ? INCXDP_CHAOS_ETH_RETURN : INCXDP_CHAOS_ETH_REFLECT;
            f[12] = uint8_t(t >> 8);
            f[13] = uint8_t(t);
        }
        return f;
    }
    if (r < 57) {
        kind = Kind::Roce;
        return random_roce();
    }
    const uint32_t b = rng_.below(100);
    if (b < 50) {
        kind = Kind::MutatedGuided;
        f = guided();
    } else if (b < 70) {
        kind = Kind::MutatedSwitchml;
        f = random_switchml();
    } else if (b < 88) {
        kind = Kind::MutatedNative;
        f = random_native();
    } else {
        kind = Kind::MutatedRoce;
        f = random_roce();
    }
    mutate(f);
    return f;
}

} // namespace incxdp::fuzz
