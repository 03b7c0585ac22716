// SPDX-License-Identifier: BSD-2-Clause
#include "roce_soft_switch.h"

#include "held_frames_transport.h"

#include <arpa/inet.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <stdexcept>
#include <string>

namespace incxdp::test {
namespace {

using detail::RoceFrameView;
using detail::RoceParse;

constexpr uint32_t kImmKindMask = 0x0000ff00u | (3u << 14) | (3u << 12);

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int32_t be32(const std::byte *p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return int32_t(ntohl(v));
}

int32_t combine(uint8_t op, int32_t a, int32_t b) {
    switch (op) {
    case ROCE_OPR_MAX:
        return std::max(a, b);
    case ROCE_OPR_MIN:
        return std::min(a, b);
    default:
        return int32_t(uint32_t(a) + uint32_t(b));
    }
}

uint32_t ip(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    return htonl(a << 24 | b << 16 | c << 8 | d);
}

class LoopTransport final : public HeldFramesTransport {
  public:
    LoopTransport(SoftRoceNet &net, uint32_t r) : net_(net), r_(r) {}

    size_t send_batch(std::span<const std::span<const std::byte>> pkts) override {
        for (const auto &p : pkts)
            net_.from_host(r_, p);
        return pkts.size();
    }

    void wait(std::chrono::nanoseconds timeout, bool) override { net_.wait_for(r_, timeout); }

    std::string describe() const override { return "soft roce rank " + std::to_string(r_); }

  private:
    size_t take(std::vector<std::vector<std::byte>> &held, size_t max) override {
        return net_.take(r_, held, max);
    }

    SoftRoceNet &net_;
    uint32_t r_;
};

} // namespace

SoftRoceNet::SoftRoceNet(SoftSwitchConfig cfg)
    : cfg_(cfg), conns_(cfg.ranks), down_ep_(cfg.ranks), rx_(cfg.ranks), slots_(cfg.pool),
      cv_(cfg.ranks), inbox_(cfg.ranks), late_(cfg.ranks), delivered_(cfg.ranks, 0) {
    if (cfg.pool == 0 || (cfg.pool & (cfg.pool - 1)) != 0)
        throw std::invalid_argument("soft switch: pool must be a power of two");
    for (uint32_t r = 0; r < cfg.ranks; ++r) {
        SoftConn &c = conns_[r];
        c.host_qpn = 0x100 + 2 * r + 1;
        c.switch_qpn = 0x900 + 3 * r + 2;
        // Different bases per connection and direction, all near start_psn.
        c.up_base = (cfg.start_psn + 3 * r) & ROCE_PSN_MASK;
        c.down_base = (cfg.start_psn + 0x10 + 5 * r) & ROCE_PSN_MASK;
        c.host_sport = uint16_t(0xc000 + r);
        c.switch_sport = uint16_t(0xc100 + r);
        c.host_mac = {0x02, 0, 0, 0, 0x01, uint8_t(r)};
        c.switch_mac = {0x02, 0, 0, 0, 0x02, uint8_t(r)};
        c.host_ip = ip(10, 99, 0, r + 1);
        c.switch_ip = ip(10, 99, 0, 254);
        detail::RoceEndpoint &e = down_ep_[r];
        e.src_mac = c.switch_mac;
        e.dst_mac = c.host_mac;
        e.src_ip = c.switch_ip;
        e.dst_ip = c.host_ip;
        e.src_port = c.switch_sport;
        e.dst_qpn = c.host_qpn;
        rx_[r].epsn = rx_[r].acked = c.up_base;
    }
}

SoftRoceNet::~SoftRoceNet() = default;

std::unique_ptr<Transport> SoftRoceNet::transport(uint32_t r) {
    return std::make_unique<LoopTransport>(*this, r);
}

SoftSwitchCounters SoftRoceNet::counters() const {
    std::lock_guard lock(mu_);
    return c_;
}

uint32_t SoftRoceNet::epsn(uint32_t r) const {
    std::lock_guard lock(mu_);
    return rx_[r].epsn;
}

bool SoftRoceNet::chance(double p) {
    if (p <= 0)
        return false;
    uint64_t x = splitmix64(cfg_.seed * 0x1000193ull + draws_++);
    return double(x >> 11) * 0x1.0p-53 < p;
}

void SoftRoceNet::from_host(uint32_t r, std::span<const std::byte> frame) {
    std::lock_guard lock(mu_);
    ++c_.rx;
    if (c_.rx == cfg_.drop_up_nth || chance(cfg_.drop_up)) {
        ++c_.lost;
        return;
    }
    std::vector<std::byte> f(frame.begin(), frame.end());
    if (f.size() > 8 && chance(cfg_.corrupt_up)) {
        f[f.size() - 6] ^= std::byte(0x40);
        ++c_.corrupted;
    }
    int copies = chance(cfg_.dup_up) ? 2 : 1;
    for (int i = 0; i < copies; ++i)
        ingress(r, f);
}

void SoftRoceNet::ingress(uint32_t r, std::span<const std::byte> frame) {
    RoceFrameView v;
    switch (detail::parse_roce(frame, v, true)) {
    case RoceParse::Ok:
        break;
    case RoceParse::BadIcrc:
        ++c_.bad_icrc;
        return;
    default:
        ++c_.malformed;
        return;
    }
    const SoftConn &c = conns_[r];
    if (v.dqpn != c.switch_qpn || v.src_ip != c.host_ip || v.src_mac != c.host_mac ||
        v.src_port != c.host_sport) {
        ++c_.unknown_qp;
        return;
    }
    if (v.opcode == ROCE_OP_ACK && (*v.aeth & ROCE_AETH_SYNDROME_MASK) == ROCE_AETH_SYNC_REQ) {
        // Where the connection stands: the PSN expected next and that of
        // the next result, at the same idx; a NAK of an earlier process
        // and the ACK it was owed are forgotten.
        Rx &x = rx_[r];
        ++c_.sync;
        x.nak_sent = false;
        x.acked = x.epsn;
        uint32_t idx = (x.epsn - c.up_base) & ROCE_PSN_MASK;
        send_ack(r, x.epsn, ROCE_AETH_SYNC_ANS | ((c.down_base + idx) & ROCE_AETH_MSN_MASK));
        return;
    }
    if (v.opcode == ROCE_OP_ACK) {
        Rx &x = rx_[r];
        if (!cfg_.any_order && x.acked != x.epsn) {
            ++c_.late_ack;
            ack_taken(r, x);
        } else {
            ++c_.peer_ack;
        }
        return;
    }
    on_send(r, v);
}

// A SEND the switch has taken before (or whose set moved on).
void SoftRoceNet::on_duplicate(uint32_t r, Rx &x, uint32_t idx24, const Set &s) {
    if (s.idx == int64_t(idx24) && s.complete) {
        ++c_.dup_result;
        send_result(r, idx24, s);
    } else if (s.idx == int64_t(idx24)) {
        ++c_.dup_ack;
        ack_taken(r, x);
    } else {
        ++c_.stale;
    }
}

void SoftRoceNet::on_send(uint32_t r, const RoceFrameView &v) {
    if (v.ackreq)
        ++c_.ackreq;
    Rx &x = rx_[r];
    int32_t d = roce_psn_diff(v.psn, x.epsn);
    uint32_t idx24 = (v.psn - conns_[r].up_base) & ROCE_PSN_MASK;
    Set &s = slots_[idx24 % cfg_.pool][(idx24 / cfg_.pool) & 1];
    if (cfg_.any_order) {
        // As the engine takes a non-strict child's frames: anything within
        // the pool that this rank's bit in the set does not show yet.
        const int32_t pool = int32_t(cfg_.pool);
        if (d >= pool) {
            ++c_.ahead_drop;
            return;
        }
        bool seen = s.idx == int64_t(idx24) && (s.bitmap >> r & 1);
        bool older = s.idx >= 0 && s.idx != int64_t(idx24) &&
                     roce_psn_diff(idx24, uint32_t(s.idx)) < 0;
        if (d < -pool || seen || older) {
            on_duplicate(r, x, idx24, s);
            return;
        }
        if (d > 0)
            ++c_.accepted_ahead;
    } else if (d > 0) {
        // Strict peer: one NAK per expected PSN, then drop until it comes.
        if (!x.nak_sent) {
            x.nak_sent = true;
            ++c_.nak;
            if (naks_dropped_ < cfg_.drop_naks) {
                ++naks_dropped_;
                ++c_.lost;
            } else {
                send_ack(r, x.epsn, ROCE_AETH_NAK_SEQ | x.msn);
            }
        } else {
            ++c_.ahead_drop;
        }
        return;
    } else if (d < 0) {
        on_duplicate(r, x, idx24, s);
        return;
    }
    uint32_t imm = v.imm.value_or(s.imm);
    if (s.idx == int64_t(idx24) && ((s.imm ^ imm) & (kImmKindMask | 0xffu)) != 0) {
        ++c_.mismatch;
        return;
    }
    if (d >= 0) { // any_order: epsn is the highest PSN taken + 1
        uint32_t before = x.epsn;
        x.epsn = (v.psn + 1) & ROCE_PSN_MASK;
        if (x.epsn < before)
            ++c_.wraps;
    }
    x.msn = (x.msn + 1) & ROCE_AETH_MSN_MASK;
    x.nak_sent = false;
    ++c_.accepted;
    if (s.idx != int64_t(idx24)) { // the set's next use
        s = Set{};
        s.idx = idx24;
        s.imm = imm;
    }
    size_t n = v.payload.size() / 4;
    uint8_t prim = roce_imm_prim(imm), op = roce_imm_op(imm);
    if (prim == ROCE_PRIM_BROADCAST) {
        // Only the root's payload is data; the others' may be padding
        // (hosts whose frames the switch cannot grow send zeros).
        if (n != 0 && r == roce_imm_dest(imm)) {
            if (s.have_data)
                ++c_.mismatch; // two roots
            s.vals.resize(n);
            for (size_t i = 0; i < n; ++i)
                s.vals[i] = be32(v.payload.data() + 4 * i);
            s.have_data = true;
        }
    } else if (op != ROCE_OPR_BARRIER) {
        if (!s.have_data) {
            s.vals.resize(n);
            for (size_t i = 0; i < n; ++i)
                s.vals[i] = be32(v.payload.data() + 4 * i);
            s.have_data = true;
        } else if (s.vals.size() != n) {
            ++c_.mismatch;
        } else {
            for (size_t i = 0; i < n; ++i)
                s.vals[i] = combine(op, s.vals[i], be32(v.payload.data() + 4 * i));
        }
    }
    s.bitmap |= uint64_t(1) << r;
    if (uint32_t(std::popcount(s.bitmap)) == cfg_.ranks) {
        s.complete = true;
        ++c_.down;
        for (uint32_t q = 0; q < cfg_.ranks; ++q)
            send_result(q, idx24, s);
    } else if (v.ackreq && !cfg_.any_order) {
        ++c_.ack;
        ack_taken(r, x); // v.psn: epsn - 1
    } else if (v.ackreq) {
        ++c_.ack;
        send_ack(r, v.psn, ROCE_AETH_ACK | x.msn);
    } else {
        ++c_.absorbed;
    }
}

// A cumulative ACK of everything taken: the last PSN before epsn.
void SoftRoceNet::ack_taken(uint32_t r, Rx &x) {
    x.acked = x.epsn;
    send_ack(r, (x.epsn - 1) & ROCE_PSN_MASK, ROCE_AETH_ACK | x.msn);
}

void SoftRoceNet::send_ack(uint32_t r, uint32_t psn, uint32_t aeth) {
    std::vector<std::byte> f(ROCE_ACK_FRAME);
    size_t len =
        detail::build_roce_frame(f, down_ep_[r], ROCE_OP_ACK, psn, false, aeth, std::nullopt, {});
    f.resize(len);
    deliver(r, std::move(f));
}

void SoftRoceNet::send_result(uint32_t r, uint32_t idx24, const Set &s) {
    uint8_t prim = roce_imm_prim(s.imm), op = roce_imm_op(s.imm);
    bool data = s.have_data && (prim == ROCE_PRIM_BROADCAST || op != ROCE_OPR_BARRIER);
    if (prim == ROCE_PRIM_REDUCE && roce_imm_dest(s.imm) != r)
        data = false; // the Reduce cut: a completion
    std::vector<std::byte> payload;
    if (data) {
        payload.resize(4 * s.vals.size());
        for (size_t i = 0; i < s.vals.size(); ++i) {
            uint32_t be = htonl(uint32_t(s.vals[i]));
            std::memcpy(payload.data() + 4 * i, &be, 4);
        }
    }
    std::vector<std::byte> f(detail::kRoceImmPayloadOff + payload.size() + ROCE_ICRC_LEN);
    uint32_t psn = (conns_[r].down_base + idx24) & ROCE_PSN_MASK;
    size_t len = detail::build_roce_frame(f, down_ep_[r], ROCE_OP_SEND_ONLY_IMM, psn, false,
                                          std::nullopt, s.imm, payload);
    f.resize(len);
    deliver(r, std::move(f));
}

void SoftRoceNet::deliver(uint32_t r, std::vector<std::byte> f) {
    if (chance(cfg_.drop_down)) {
        ++c_.lost;
        return;
    }
    if (chance(cfg_.corrupt_down)) {
        f[f.size() - 6] ^= std::byte(0x40);
        ++c_.corrupted;
    }
    if (chance(cfg_.late_down)) {
        ++c_.late;
        late_[r].push_back({delivered_[r] + cfg_.late_by, std::move(f)});
        return;
    }
    int copies = chance(cfg_.dup_down) ? 2 : 1;
    for (int i = 0; i < copies; ++i) {
        inbox_[r].push_back(f);
        ++delivered_[r];
    }
    auto &late = late_[r];
    for (size_t i = 0; i < late.size();) {
        if (late[i].due <= delivered_[r]) {
            inbox_[r].push_back(std::move(late[i].frame));
            late.erase(late.begin() + ptrdiff_t(i));
        } else {
            ++i;
        }
    }
    cv_[r].notify_one();
}

size_t SoftRoceNet::take(uint32_t r, std::vector<std::vector<std::byte>> &out, size_t max) {
    std::lock_guard lock(mu_);
    return take_front(inbox_[r], out, max);
}

void SoftRoceNet::wait_for(uint32_t r, std::chrono::nanoseconds t) {
    std::unique_lock lock(mu_);
    cv_[r].wait_for(lock, t, [&] { return !inbox_[r].empty(); });
}

} // namespace incxdp::test
