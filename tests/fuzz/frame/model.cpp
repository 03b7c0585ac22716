// SPDX-License-Identifier: BSD-2-Clause
// The rules, in the order docs/ENGINE.md "Per frame" lists them.
#include "model.h"

#include <algorithm>
#include <incxdp/proto.h>
#include <incxdp/roce.h>
#include <incxdp/chaos.h>
#include <incxdp/switchml.h>

#include <linux/bpf.h>

#include <cstring>

namespace incxdp::fuzz {
namespace {

using test::get16;
using test::get32;
using test::kEth;
using test::kL4;

// Frame offsets (Ethernet | option-less IPv4 | UDP).
constexpr size_t kIpTotLen = kEth + 2, kIpId = kEth + 4, kIpFrag = kEth + 6, kIpTtl = kEth + 8,
                 kIpProto = kEth + 9, kIpSrc = kEth + 12, kIpDst = kEth + 16;
constexpr size_t kUdpSrc = kEth + 20, kUdpDst = kEth + 22, kUdpLen = kEth + 24,
                 kUdpCsum = kEth + 26;
// One XDP buffer: a page less XDP headroom and skb_shared_info. Of a longer
// test frame bpf_prog_test_run makes fragments (the engine is xdp.frags).
constexpr size_t kXdpLinearMax = 4096 - 256 - 320;
// What bpf_xdp_pull_data can make linear there: the data may also move down
// into the headroom, all but the room of a struct xdp_frame (40 B).
constexpr size_t kXdpPullMax = kXdpLinearMax + 256 - 40;

void put16_at(Bytes &b, size_t off, uint16_t v) {
    b[off] = uint8_t(v >> 8);
    b[off + 1] = uint8_t(v);
}

bool in_switchml_range(uint16_t port) {
    return port >= SWITCHML_UDP_PORT_MIN && port <= SWITCHML_UDP_PORT_MAX;
}

bool tag_matches(const incxdp_slot_set &s, const Decoded &k) {
    return s.round == k.round && s.chunk == k.chunk && s.op == k.op && s.dtype == k.dtype &&
           s.nelems == k.nelems;
}

int32_t elem(const Bytes &f, size_t payload, size_t i) {
    return int32_t(get32(f, payload + 4 * i));
}

// RoCEv2 ICRC (docs/PROTOCOLS.md §3), bit by bit: CRC-32 (reflected 0xEDB88320) over
// 8 x 0xFF and the frame from the IPv4 header up to the ICRC, with TOS, TTL,
// the IP and UDP checksums and the BTH's resv8 read as ones.
uint32_t roce_icrc(const Bytes &f) {
    const size_t ip = kEth, udp = ip + 20, bth = udp + 8;
    auto masked = [&](size_t i) {
        return i == ip + 1 || i == ip + 8 || i == ip + 10 || i == ip + 11 || i == udp + 6 ||
               i == udp + 7 || i == bth + 4;
    };
    uint32_t crc = 0xffffffffu;
    auto add = [&](uint8_t b) {
        crc ^= b;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0xedb88320u & (0u - (crc & 1)));
    };
    for (int i = 0; i < 8; i++)
        add(0xff);
    for (size_t i = ip; i + 4 < f.size(); i++)
        add(masked(i) ? 0xff : f[i]);
    return ~crc;
}

// docs/ROCE.md §3 as far as the fuzzer's world reaches it: it installs no
// RoCE connection, so every RoCE frame ends in one of the first checks,
// frame shape and lengths, the UDP checksum or else the ICRC, an unknown QPN;
// none changes a slot.
int roce_refusal(const Bytes &f) {
    const size_t n = f.size(), bth = kL4;
    if (n < bth + 12)
        return INCXDP_STAT_ROCE_MALFORMED;
    // Exactly the datagram: a RoCE frame (>= 62 B) is never padded.
    const size_t ip_len = get16(f, kIpTotLen), udp_len = get16(f, kUdpLen);
    if (ip_len != n - kEth || udp_len + 20 != ip_len)
        return INCXDP_STAT_ROCE_MALFORMED;
    const uint8_t op = f[bth];
    if (op > ROCE_OP_SEND_ONLY_IMM && op != ROCE_OP_ACK)
        return INCXDP_STAT_ROCE_MALFORMED;
    if (f[bth + 1] & 0x3f) // PadCnt, TVer
        return INCXDP_STAT_ROCE_MALFORMED;
    const bool word =
        op == ROCE_OP_ACK || op == ROCE_OP_SEND_LAST_IMM || op == ROCE_OP_SEND_ONLY_IMM;
    const size_t hdr = 8 + 12 + (word ? 4 : 0) + 4; // UDP, BTH, AETH/ImmDt, ICRC
    if (udp_len < hdr)
        return INCXDP_STAT_ROCE_MALFORMED;
    const size_t payload = udp_len - hdr;
    if (op == ROCE_OP_ACK ? payload != 0 : payload % 64 || payload > ROCE_MAX_PAYLOAD)
        return INCXDP_STAT_ROCE_MALFORMED;
    // A nonzero UDP checksum is checked instead of the ICRC (bpf/lib/udp_csum.h).
    if (get16(f, kEth + test::kIp + 6) != 0)
        return test::udp_sum(f) == 0xffff ? INCXDP_STAT_ROCE_UNKNOWN_QP : INCXDP_STAT_ROCE_BAD_CSUM;
    const uint32_t stored = uint32_t(f[n - 4]) | uint32_t(f[n - 3]) << 8 |
                            uint32_t(f[n - 2]) << 16 | uint32_t(f[n - 1]) << 24;
    if (roce_icrc(f) != stored)
        return INCXDP_STAT_ROCE_BAD_ICRC;
    return INCXDP_STAT_ROCE_UNKNOWN_QP;
}

} // namespace

Model::Model(bool can_pull) : can_pull_(can_pull), slots_(kSlotEntries) {
    std::memset(slots_.data(), 0, slots_.size() * sizeof(incxdp_slot));
    for (const auto &j : kJobs)
        jobs_[j.id] = job_entry(j);
    for (const auto &s : registered_senders())
        senders_[{s.ep.mac, s.ep.ip, s.ep.port}] = {s.job, s.rank, s.ifindex};
}

void Model::reset_pool(const JobDef &j) {
    for (uint32_t i = j.pool_base; i < j.pool_base + j.pool_size; i++)
        std::memset(&slots_[i], 0, sizeof(incxdp_slot));
}

// docs/PROTOCOLS.md §1-§2: header checks and payload length; no state.
std::optional<Decoded> Model::decode(const Bytes &f, bool switchml) const {
    Decoded d;
    d.switchml = switchml;
    // One buffer: apply() has taken longer frames for too_long.
    const size_t n = f.size();
    const size_t h = kL4;
    if (switchml) {
        d.hdr_len = SWITCHML_HDR_LEN;
        if (n < h + d.hdr_len)
            return std::nullopt;
        if (f[h] >> 4 != SWITCHML_MSG_UPDATE)
            return std::nullopt;
        uint16_t pool = get16(f, h + 6);
        if (pool & 0x4000)
            return std::nullopt;
        uint8_t size = f[h] & 0x7; // bit 3 is "unused"
        if (size > SWITCHML_SIZE_MAX) // docs/PROTOCOLS.md §2: 0..3
            return std::nullopt;
        d.nelems = uint16_t(32u << size);
        d.slot = pool & SWITCHML_POOL_INDEX_MASK;
        d.set = (pool & SWITCHML_POOL_SET_BIT) ? 1 : 0;
        d.op = INCXDP_OP_SUM;
        d.dtype = INCXDP_DTYPE_INT32;
        d.exp0 = int8_t(f[h + 8]);
        d.exp1 = int8_t(f[h + 9]);
    } else {
        d.hdr_len = INCXDP_HDR_LEN;
        if (n < h + d.hdr_len)
            return std::nullopt;
        if (f[h] != INCXDP_MAGIC || f[h + 1] >> 4 != INCXDP_VERSION ||
            (f[h + 1] & 0xf) > INCXDP_MSG_RESULT)
            return std::nullopt;
        d.result = (f[h + 1] & 0xf) == INCXDP_MSG_RESULT;
        d.op = f[h + 2];
        d.dtype = f[h + 3];
        if (d.op >= INCXDP_OP_COUNT || d.dtype >= INCXDP_DTYPE_COUNT)
            return std::nullopt;
        d.nelems = get16(f, h + 22);
        if (d.nelems > INCXDP_MAX_ELEMS || d.nelems % INCXDP_ELEM_QUANTUM)
            return std::nullopt;
        uint16_t slot = get16(f, h + 20);
        if (slot & 0x4000)
            return std::nullopt;
        d.slot = slot & INCXDP_SLOT_INDEX_MASK;
        d.set = (slot & INCXDP_SLOT_SET_BIT) ? 1 : 0;
        d.job = get32(f, h + 4);
        d.round = get32(f, h + 8);
        d.chunk = get32(f, h + 12);
        d.rank = get16(f, h + 16);
        d.nworkers = get16(f, h + 18);
        d.exp0 = int8_t(f[h + 24]);
        d.exp1 = 0;
    }
    const size_t need = d.hdr_len + size_t(d.nelems) * 4;
    if (n - h < need)
        return std::nullopt;
    // The datagram, by its own length fields, must hold the payload too.
    const size_t ip_len = get16(f, kIpTotLen), udp_len = get16(f, kUdpLen);
    if (ip_len < 28 || kEth + ip_len > n || udp_len != ip_len - 20 || udp_len < 8 + need)
        return std::nullopt;
    return d;
}

ChaosHook chaos_hook(const Bytes &f, Bytes &seen) {
    seen = f;
    if (f.size() < kEth)
        return ChaosHook::None;
    auto retag = [&](uint16_t t) {
        seen[12] = uint8_t(t >> 8);
        seen[13] = uint8_t(t);
    };
    switch (get16(f, 12)) {
    case INCXDP_CHAOS_ETH_REFLECT:
        retag(INCXDP_CHAOS_ETH_RETURN);
        return ChaosHook::Reflect;
    case INCXDP_CHAOS_ETH_RETURN:
        retag(0x0800);
        return ChaosHook::Return;
    default:
        return ChaosHook::None;
    }
}

Prediction Model::apply(const Bytes &f) {
    // Before anything reads it (the chaos hook too), a frame in fragments
    // that fits the buffer's room is pulled whole; a longer one stays as it is.
    const bool pulled = can_pull_ && f.size() > kXdpLinearMax && f.size() <= kXdpPullMax;
    Bytes seen;
    switch (chaos_hook(f, seen)) {
    case ChaosHook::Reflect: {
        Prediction r;
        r.pulled = pulled;
        r.stat = INCXDP_STAT_CHAOS;
        r.verdict = XDP_TX;
        r.out = std::move(seen);
        r.check_out = true;
        return r;
    }
    case ChaosHook::Return:
        return apply(seen);
    case ChaosHook::None:
        break;
    }
    Prediction p;
    p.out = f;
    p.pulled = pulled;
    auto verdict = [&](int stat, int v) {
        p.stat = stat;
        p.verdict = v;
        p.check_out = v == XDP_PASS;
        return p;
    };
    const size_t n = f.size();

    // 1. Ethernet -> option-less, unfragmented IPv4 -> UDP to one of our ports.
    if (n < kEth || get16(f, 12) != 0x0800)
        return verdict(INCXDP_STAT_PASS, XDP_PASS);
    if (n < kEth + 20 || f[kEth] != 0x45 || (get16(f, kIpFrag) & 0x3fff) || f[kIpProto] != 17)
        return verdict(INCXDP_STAT_PASS, XDP_PASS);
    if (n < kL4)
        return verdict(INCXDP_STAT_PASS, XDP_PASS);
    const uint16_t dport = get16(f, kUdpDst);
    const bool switchml = in_switchml_range(dport);
    if (!switchml && dport != kNativePort && dport != kRocePort)
        return verdict(INCXDP_STAT_PASS, XDP_PASS);
    // Ours by port, but the frame goes on in fragments (a jumbo link's):
    // the engine reads none of it.
    if (n > kXdpLinearMax && !pulled)
        return verdict(INCXDP_STAT_TOO_LONG, XDP_DROP);
    // UDP 4791 is classified last, as the engine does.
    if (!switchml && dport != kNativePort)
        return verdict(roce_refusal(f), XDP_DROP);

    // 2. Decode.
    auto k = decode(f, switchml);
    if (!k)
        return verdict(INCXDP_STAT_MALFORMED, XDP_DROP);
    // A RESULT is only taken from a tree job's parent switch; no job here
    // has one (docs/ENGINE.md "Trees").
    if (k->result)
        return verdict(INCXDP_STAT_NOT_PARENT, XDP_DROP);

    // 3. Sender, job, slot.
    SenderKey key;
    std::memcpy(std::get<0>(key).data(), &f[6], 6);
    std::get<1>(key) = get32(f, kIpSrc);
    std::get<2>(key) = get16(f, kUdpSrc);
    auto ws = senders_.find(key);
    if (ws == senders_.end())
        return verdict(INCXDP_STAT_UNKNOWN_SENDER, XDP_DROP);
    const Sender &w = ws->second;
    if (w.ifindex != kTestIfindex)
        return verdict(INCXDP_STAT_WRONG_PORT, XDP_DROP);
    if (switchml) {
        k->job = w.job;
        k->rank = w.rank;
    }
    auto jit = jobs_.find(w.job);
    const incxdp_job *job = jit == jobs_.end() ? nullptr : &jit->second;
    if (!job || !job->active || k->job != w.job || k->rank != w.rank || k->rank >= job->nworkers ||
        (k->nworkers && k->nworkers != job->nworkers))
        return verdict(INCXDP_STAT_BAD_JOB, XDP_DROP);
    if (k->slot >= job->pool_size || k->nelems > job->max_elems ||
        job->pool_base + k->slot >= kSlotEntries)
        return verdict(INCXDP_STAT_BAD_SLOT, XDP_DROP);

    // 4. The slot rules of docs/PROTOCOLS.md §1-§2, per (slot, set), with the set's tag.
    const uint32_t idx = job->pool_base + k->slot;
    incxdp_slot &slot = slots_[idx];
    incxdp_slot_set &cur = slot.set[k->set];
    incxdp_slot_set &other = slot.set[k->set ^ 1];
    int32_t *vals = slot.vals[k->set];
    const uint32_t bit = 1u << (k->rank & 31);
    const size_t payload = kL4 + k->hdr_len;
    p.slot_index = idx;
    p.set = k->set;

    int stat;
    if (cur.bitmap & bit) {
        stat = cur.remaining
                   ? INCXDP_STAT_RETX_DROP
                   : (tag_matches(cur, *k) ? INCXDP_STAT_RETX_UNICAST : INCXDP_STAT_STALE);
    } else if (cur.remaining == 0) {
        // First contribution of a round in this set: it writes.
        cur.round = k->round;
        cur.chunk = k->chunk;
        cur.op = k->op;
        cur.dtype = k->dtype;
        cur.nelems = k->nelems;
        cur.exp0 = k->exp0;
        cur.exp1 = k->exp1;
        cur.bitmap |= bit;
        other.bitmap &= ~bit;
        for (size_t i = 0; i < k->nelems; i++)
            vals[i] = elem(f, payload, i);
        cur.remaining = job->nworkers - 1;
        stat = cur.remaining ? INCXDP_STAT_CONSUMED : INCXDP_STAT_COMPLETED;
    } else if (!tag_matches(cur, *k)) {
        stat = INCXDP_STAT_MISMATCH;
    } else {
        cur.bitmap |= bit;
        other.bitmap &= ~bit;
        for (size_t i = 0; i < k->nelems; i++) {
            int32_t x = elem(f, payload, i);
            if (k->op == INCXDP_OP_MAX)
                vals[i] = x > vals[i] ? x : vals[i];
            else if (k->op == INCXDP_OP_MIN)
                vals[i] = x < vals[i] ? x : vals[i];
            else
                vals[i] = int32_t(uint32_t(vals[i]) + uint32_t(x)); // wraps, like the ASIC
        }
        cur.exp0 = k->exp0 > cur.exp0 ? k->exp0 : cur.exp0;
        cur.exp1 = k->exp1 > cur.exp1 ? k->exp1 : cur.exp1;
        cur.remaining -= 1;
        stat = cur.remaining ? INCXDP_STAT_CONSUMED : INCXDP_STAT_COMPLETED;
    }
    if (stat == INCXDP_STAT_COMPLETED)
        cur.rounds += 1;
    if (stat != INCXDP_STAT_COMPLETED && stat != INCXDP_STAT_RETX_UNICAST)
        return verdict(stat, XDP_DROP);

    // 5. The result: header turned into a RESULT, the set's values.
    Bytes &o = p.out;
    if (k->switchml) {
        o[kL4] = uint8_t(SWITCHML_MSG_RESULT << 4 | (f[kL4] & 0x0f));
        o[kL4 + 8] = uint8_t(cur.exp0);
        o[kL4 + 9] = uint8_t(cur.exp1);
    } else {
        o[kL4 + 1] = uint8_t(INCXDP_VERSION << 4 | INCXDP_MSG_RESULT);
        o[kL4 + 24] = uint8_t(cur.exp0);
    }
    for (size_t i = 0; i < k->nelems; i++) {
        uint32_t v = uint32_t(vals[i]);
        for (int b = 0; b < 4; b++)
            o[payload + 4 * i + size_t(b)] = uint8_t(v >> (24 - 8 * b));
    }
    if (stat == INCXDP_STAT_COMPLETED) {
        // Multicast: the IP ID carries the job to the egress program, which
        // rewrites addresses and the checksum per copy.
        put16_at(o, kIpId, uint16_t(w.job));
    } else {
        // Unicast back to the sender, from the switch.
        for (size_t i = 0; i < 6; i++)
            std::swap(o[i], o[6 + i]);
        for (size_t i = 0; i < 4; i++)
            std::swap(o[kIpSrc + i], o[kIpDst + i]);
        o[kIpTtl] = 64;
        put16_at(o, kEth + 10, 0);
        put16_at(o, kEth + 10, test::ip_checksum(&o[kEth]));
        for (size_t i = 0; i < 2; i++)
            std::swap(o[kUdpSrc + i], o[kUdpDst + i]);
        put16_at(o, kUdpCsum, 0);
    }
    p.stat = stat;
    p.verdict = stat == INCXDP_STAT_COMPLETED ? XDP_REDIRECT : XDP_TX;
    p.check_out = true;
    return p;
}

} // namespace incxdp::fuzz
