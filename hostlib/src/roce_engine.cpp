// SPDX-License-Identifier: BSD-2-Clause
#include "roce_engine.h"
#include "stop.h"

#include <fmt/format.h>
#include <incxdp/util/ipv4.h>

#include <algorithm>
#include <array>
#include <stdexcept>

namespace incxdp::detail {
namespace {

// Frames are never longer than what we send; anything longer is not ours.
constexpr size_t kRecvSlack = 64;
// Later results before a missing one goes again, until reordering beyond
// it is seen: what a software switch on one CPU swaps.
constexpr uint64_t kMinReorder = 32;
// Strict order: the frames in flight after a loss. 128 carry 1 KB payloads
// on tree124 as fast as 1024 do (docs/ROCE.md §4), and a loss then resends
// at most that many.
constexpr uint64_t kMinLossWindow = 128;
// ImmDt bits the result must echo: primitive, op and dtype (not dest_rank).
constexpr uint32_t kImmKindMask = 0x0000ff00u | (3u << 14) | (3u << 12);
// AETH syndrome classes (IBA 9.7.5.1.5): top three bits.
constexpr uint32_t kAethClassMask = 0xe0u;
constexpr uint32_t kAethClassAck = 0x00u;
// The start handshake's request goes again after each timeout (doubling),
// this many times in all. A leaf that never answers it (a switch without
// the handshake: the reference pcap switch) is taken to start every run at
// the topology's bases, as incxdp's switches did before it.
constexpr uint32_t kSyncTries = 6;

// The start check (docs/ROCE.md "Consecutive runs"): one payload-less
// Barrier whose ImmDt carries ROCE_IMM_START, which no data collective has.
class StartCheck final : public RocePackets {
  public:
    uint64_t count() const override { return 1; }
    uint32_t build(uint64_t, std::span<std::byte>, uint32_t &imm) override {
        imm = roce_imm_make(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_BARRIER,
                            ROCE_DTYPE_INT32) |
              ROCE_IMM_START;
        return 0;
    }
    uint32_t result_elems(uint64_t) const override { return 0; }
    void consume(uint64_t, std::span<const std::byte>) override {}
};

RoceEndpoint endpoint_of(const CommConfig &c) {
    RoceEndpoint e;
    e.src_mac = c.roce.local_mac;
    e.dst_mac = c.roce.switch_mac;
    e.src_ip = util::ipv4_be_or_throw(c.local_ip, "roce: local address");
    e.dst_ip = util::ipv4_be_or_throw(c.switch_ip, "roce: switch address");
    e.src_port = c.roce.sport;
    e.dst_qpn = c.roce.remote_qpn;
    return e;
}

} // namespace

RoceEngine::RoceEngine(const CommConfig &cfg, Transport &transport)
    : cfg_(cfg), transport_(transport), tmpl_(endpoint_of(cfg)),
      per_packet_(cfg.effective_elems_per_packet()),
      max_frame_(RoceSendTemplate::frame_len(4 * size_t(per_packet_))), window_(cfg.window),
      reorder_(kMinReorder), in_flight_(cfg.window), backlog_(cfg) {
    send_mem_.resize(size_t(window_) * max_frame_);
    ring_.resize(window_);
    for (size_t i = 0; i < ring_.size(); ++i)
        ring_[i].buf = send_mem_.data() + i * max_frame_;
    recv_views_.resize(cfg.batch);
    send_spans_.reserve(cfg.batch);
    send_idx_.reserve(cfg.batch);
}

uint32_t RoceEngine::up_psn(uint64_t idx) const {
    return uint32_t(cfg_.roce.up_base + idx) & ROCE_PSN_MASK;
}

// A PSN of the stream starting at `stream_base` names the index (psn -
// stream_base) mod 2^24; placed relative to the oldest index without a
// result (the window is far below 2^23, so the signed 24-bit distance is
// unambiguous).
int32_t RoceEngine::from_base(uint32_t psn, uint32_t stream_base) const {
    return roce_psn_diff((psn - stream_base) & ROCE_PSN_MASK, uint32_t(base_) & ROCE_PSN_MASK);
}

void RoceEngine::run(RocePackets &call, const char *what, CommStats &stats) {
    uint64_t count = call.count();
    if (count == 0)
        return;
    if (!started_)
        start();
    call_ = &call;
    stats_ = &stats;
    what_ = what;
    first_ = next_;
    end_ = next_ + count;
    done_ = 0;
    retries_ = 0;
    newest_ = scan_ = next_;
    fast_.clear();
    probing_ = false;
    stats.reorder = std::max(stats.reorder, reorder_);
    rto_ = cfg_.timeout;
    auto now = Clock::now();
    last_progress_ = now;
    timer_ = Clock::time_point::max();
    send_blocked_ = false;
    fill_and_send(now);

    while (done_ < count) {
        size_t n = transport_.recv_views(recv_views_, max_frame_ + kRecvSlack);
        now = Clock::now();
        for (size_t i = 0; i < n; ++i) {
            ++stats.packets_received;
            stats.bytes_received += recv_views_[i].size();
            handle(recv_views_[i], now);
        }
        if (done_ == count)
            break;
        if (backlog_.drained(n) && now >= timer_)
            on_timer(now); // not while answers wait unread (rx_backlog.h)
        send_singles(fast_, true, now);
        fill_and_send(now);
        if (now - last_progress_ >= cfg_.deadline)
            fail_timeout(now, false);
        throw_if_stopped(cfg_, what);
        if (n == 0) {
            auto until = std::min(timer_, last_progress_ + cfg_.deadline);
            auto wait = std::max(until - now, Clock::duration::zero());
            transport_.wait(std::chrono::duration_cast<std::chrono::nanoseconds>(wait),
                            send_blocked_);
        }
    }
    // Every index of the call has its result: nothing is left to resend.
    tx_ = next_;
    call_ = nullptr;
}

bool RoceEngine::can_build() const {
    return next_ < end_ && next_ - base_ < window_ && call_->ready(next_ - first_);
}

bool RoceEngine::build_next() {
    if (!can_build())
        return false;
    uint64_t k = next_ - first_;
    Entry &e = entry(next_);
    uint32_t imm = 0;
    uint32_t n = call_->build(
        k, std::span(e.buf + RoceSendTemplate::payload_offset(), 4 * size_t(per_packet_)), imm);
    e.len = RoceSendTemplate::frame_len(4 * size_t(n));
    e.imm = imm;
    e.sends = 0;
    e.fast = 0;
    e.overtaken = 0;
    e.sealed = false;
    e.resulted = false;
    ++next_;
    return true;
}

void RoceEngine::fill_and_send(Clock::time_point now) {
    send_blocked_ = false;
    for (;;) {
        send_spans_.clear();
        send_idx_.clear();
        uint64_t c = tx_;
        bool blocked = false; // no new packet can be built now
        while (send_spans_.size() < cfg_.batch) {
            if (c >= base_ + in_flight_ || (c == next_ && !build_next())) {
                blocked = true;
                break;
            }
            if (!entry(c).resulted) {
                send_idx_.push_back(c);
                send_spans_.emplace_back(); // set once sealed
            }
            ++c;
        }
        if (!blocked && (c >= base_ + in_flight_ || (c == next_ && !can_build())))
            blocked = true; // the batch ended exactly where we would block
        // New frames get their PSN, AckReq and ICRC now, once: AckReq on
        // every ack_every-th packet of the call and on the last one before
        // we would block (docs/ROCE.md §4).
        for (size_t i = 0; i < send_idx_.size(); ++i) {
            uint64_t idx = send_idx_[i];
            Entry &e = entry(idx);
            if (!e.sealed) {
                uint32_t every = std::max<uint32_t>(cfg_.roce.ack_every, 1);
                bool ackreq =
                    (idx - first_ + 1) % every == 0 || (blocked && i + 1 == send_idx_.size());
                tmpl_.finish(e.buf, e.len - RoceSendTemplate::frame_len(0), up_psn(idx), ackreq,
                             e.imm);
                e.sealed = true;
            }
            send_spans_[i] = std::span<const std::byte>(e.buf, e.len);
        }
        if (send_spans_.empty()) {
            tx_ = c;
            return;
        }
        size_t sent = transport_.send_batch(send_spans_);
        for (size_t i = 0; i < sent; ++i) {
            Entry &e = entry(send_idx_[i]);
            if (e.sends++ > 0)
                ++stats_->retransmissions;
            e.sent_at = now;
            ++stats_->packets_sent;
            stats_->bytes_sent += e.len;
        }
        if (sent > 0 && timer_ == Clock::time_point::max())
            timer_ = now + rto_;
        if (sent < send_spans_.size()) {
            tx_ = send_idx_[sent];
            send_blocked_ = true; // wait for room (POLLOUT)
            return;
        }
        tx_ = c;
        if (blocked)
            return;
    }
}

void RoceEngine::handle(std::span<const std::byte> frame, Clock::time_point now) {
    RoceFrameView v;
    switch (parse_roce(frame, v, true)) {
    case RoceParse::Ok:
        break;
    case RoceParse::BadIcrc:
        ++stats_->bad_icrc;
        return;
    default:
        ++stats_->malformed;
        return;
    }
    if (v.dqpn != cfg_.roce.local_qpn) {
        ++stats_->malformed; // another connection's frame
        return;
    }
    if (v.opcode == ROCE_OP_ACK)
        on_ack(v, now);
    else
        on_result(v, now);
}

void RoceEngine::on_result(const RoceFrameView &v, Clock::time_point now) {
    // The switch's PSN names the index.
    int32_t d = from_base(v.psn, cfg_.roce.down_base);
    if (d < 0) {
        ++stats_->duplicates; // an index whose result we already took
        if (uint64_t back = uint64_t(-int64_t(d)); back <= base_)
            note_duplicate_result(base_ - back);
        return;
    }
    uint64_t idx = base_ + uint64_t(d);
    if (idx >= next_) {
        ++stats_->stale; // never sent: not a result of ours
        return;
    }
    Entry &e = entry(idx);
    if (e.resulted) {
        ++stats_->duplicates;
        note_duplicate_result(idx);
        return;
    }
    uint64_t k = idx - first_;
    // The start check's result must carry its ImmDt whole: a set that an
    // earlier run left at this index has another (a stopped run's result).
    uint32_t echo = (e.imm & 0xff) ? 0xffffffffu : kImmKindMask;
    if (v.payload.size() != 4 * size_t(call_->result_elems(k)) ||
        (v.imm && ((*v.imm ^ e.imm) & echo) != 0) || (!v.imm && echo != kImmKindMask)) {
        ++stats_->malformed;
        return;
    }
    call_->consume(k, v.payload);
    e.resulted = true;
    ++done_;
    if (in_flight_ < window_ && ++grown_ >= in_flight_) {
        ++in_flight_;
        grown_ = 0;
    }
    ++stats_->results;
    last_progress_ = now;
    e.overtaken = newest_ > idx ? newest_ - idx : 0;
    // Sent once: the distance is reordering, not a loss. Near the limit,
    // the next one may be past it.
    if (e.sends == 1 && 2 * e.overtaken > reorder_)
        learn_reorder(e.overtaken);
    note_later_result(idx);
    if (idx == base_) {
        while (base_ < next_ && entry(base_).resulted)
            ++base_;
        // The timer watches the oldest index without a result.
        retries_ = 0;
        rto_ = cfg_.timeout;
        timer_ = base_ < next_ ? now + rto_ : Clock::time_point::max();
    }
}

void RoceEngine::on_ack(const RoceFrameView &v, Clock::time_point now) {
    uint32_t syndrome = *v.aeth >> 24;
    if ((syndrome & kAethClassMask) == kAethClassAck) {
        ++stats_->acks; // cumulative; results are what count, but for a probe's answer
        if (probing_)
            on_probe_answer(v, now);
        return;
    }
    if (*v.aeth >> 24 != ROCE_AETH_NAK_SEQ >> 24) {
        ++stats_->malformed; // RNR or another NAK: not part of this protocol
        return;
    }
    ++stats_->naks;
    probing_ = false;
    // PSN = what the switch expects next on our stream.
    int32_t d = from_base(v.psn, cfg_.roce.up_base);
    if (d < 0) {
        ++stats_->stale; // expects an index we have the result of: a NAK from the past
        return;
    }
    uint64_t idx = base_ + uint64_t(d);
    if (idx < next_) {
        cut_in_flight(idx);
        go_back(idx, now);
    }
}

// Results come back nearly in order: the switches complete slots in PSN
// order, and only two CPUs finishing neighbours at once, or a detour, swap
// a few. An index reorder_ below the newest result that still has none lost
// its frame or its result: resend that one frame now rather than wait for
// the timer. Unneeded, it costs one frame: the switch answers a duplicate
// with the result it holds, or an ACK.
void RoceEngine::note_later_result(uint64_t idx) {
    newest_ = std::max(newest_, idx);
    scan_ = std::max(scan_, base_);
    // Within what may be in flight after a loss (a limit beyond it would
    // leave every loss to the timer).
    uint64_t limit = std::min(reorder_, std::max(kMinReorder, in_flight_ / 2));
    for (; scan_ + limit <= newest_; ++scan_) {
        const Entry &e = entry(scan_);
        if (!e.resulted && e.sends > 0)
            fast_.push_back(scan_);
    }
}

// A second result for an index sent twice, once by fast retransmit: both
// copies got through, so the first result was only late (a switch spreading
// completions over CPUs or RX queues reorders by up to a NAPI batch each).
// What overtook it is what the limit must let pass (a third copy asks for
// the same again). An index resent by go-back-N too, or whose entry a later
// index took over, says nothing.
void RoceEngine::note_duplicate_result(uint64_t idx) {
    if (idx >= next_ || next_ - idx > window_)
        return;
    const Entry &e = entry(idx);
    if (e.resulted && e.fast == 1 && e.sends == 2)
        learn_reorder(e.overtaken);
}

// Twice the reordering seen, as headroom; grown only on evidence, as TCP
// raises its reordering estimate and RACK its reordering window when a
// DSACK shows a retransmission was spurious. At most a quarter of the
// window: beyond that a real loss would wait for the window to stall.
void RoceEngine::learn_reorder(uint64_t overtaken) {
    uint64_t cap = std::max<uint64_t>(kMinReorder, window_ / 4);
    uint64_t want = std::min(2 * overtaken, cap);
    if (want <= reorder_)
        return;
    reorder_ = want;
    stats_->reorder = std::max(stats_->reorder, reorder_);
}

// One frame per listed index, for those still waiting for their result;
// what the transport does not take now is left to the timer. Returns how
// many of the listed indices went, from the front.
size_t RoceEngine::send_singles(std::vector<uint64_t> &idxs, bool fast, Clock::time_point now) {
    if (idxs.empty())
        return 0;
    send_spans_.clear();
    send_idx_.clear();
    for (uint64_t idx : idxs) {
        const Entry &e = entry(idx);
        if (idx >= base_ && idx < next_ && !e.resulted && e.sealed) {
            send_spans_.emplace_back(e.buf, e.len);
            send_idx_.push_back(idx);
        }
    }
    idxs.clear();
    size_t sent = send_spans_.empty() ? 0 : transport_.send_batch(send_spans_);
    for (size_t i = 0; i < sent; ++i) {
        Entry &e = entry(send_idx_[i]);
        ++e.sends;
        e.sent_at = now;
        ++stats_->retransmissions;
        if (fast) {
            ++stats_->fast_retransmits;
            ++e.fast;
        }
        ++stats_->packets_sent;
        stats_->bytes_sent += e.len;
    }
    return sent;
}

// Adds to overdue_ the indices in [from, to) sent at least `age` ago that
// still have no result.
void RoceEngine::collect_overdue(uint64_t from, uint64_t to, Clock::duration age,
                                 Clock::time_point now) {
    for (uint64_t idx = from; idx < to; ++idx) {
        const Entry &e = entry(idx);
        if (!e.resulted && e.sends > 0 && now - e.sent_at >= age)
            overdue_.push_back(idx);
    }
}

void RoceEngine::go_back(uint64_t from, Clock::time_point now) {
    tx_ = std::min(tx_, from);
    timer_ = now + rto_;
}

void RoceEngine::on_timer(Clock::time_point now) {
    if (base_ >= next_) {
        timer_ = Clock::time_point::max();
        return;
    }
    ++stats_->timeouts;
    if (cfg_.max_retries != 0 && retries_ >= cfg_.max_retries)
        fail_timeout(now, true);
    ++retries_;
    Clock::duration waited = rto_;
    rto_ = std::min<Clock::duration>(2 * rto_, cfg_.max_timeout);
    timer_ = now + rto_;
    overdue_.clear();
    if (cfg_.roce.any_order) {
        // The leaf has taken whatever arrived, in any order, so only the
        // frames sent at least one timeout ago without a result go again:
        // lost on the way up, or their result lost on the way down (the
        // leaf answers those with the result it holds). Frames still in
        // flight and frames never sent (tx_ and on) are left alone.
        collect_overdue(base_, tx_, waited, now);
        send_singles(overdue_, false, now);
        return;
    }
    probe(now, waited);
}

// host_order: strict, the timer ran out. Most timeouts only mean that
// another rank is late and the set waits for it; going back N from the
// oldest index without a result would resend the whole window for nothing
// each time, so the timer would have to be long, and every real loss the
// NAKs miss (a lost NAK, a lost resend, the call's last frames) would then
// cost that long (docs/ROCE.md §4). Instead the timer asks the leaf where
// it is: the oldest frame without a result once more, with AckReq, and an
// ACK of our own.
// The leaf answers the frame with the result if it holds it, or with an
// ACK of the last PSN it took (the frame is a duplicate of a set still
// waiting, or the one it was missing); when the frame completes the set
// instead, it owes us that ACK and sends it in answer to ours (docs/ROCE.md
// §3, roce_late_ack). The ACK says how far the leaf has taken our frames:
// what we sent beyond is lost or was dropped behind a gap (on_probe_answer).
//
// Between the two go the holes: the indices below the newest result that
// still have none and were sent a timeout ago. Their sets completed or
// their frames reached the leaf (later ones did, in order), so mostly
// their results were lost; the leaf answers each with the result it holds
// or an ACK. Fast retransmit finds such holes only `reorder` below the
// newest result; it skips those resent here (a lost resend is the next
// timeout's).
void RoceEngine::probe(Clock::time_point now, Clock::duration waited) {
    Entry &e = entry(base_);
    bool probed = e.sealed;
    if (probed) {
        roce_set_ackreq(std::span(e.buf, e.len), true);
        overdue_.push_back(base_);
    }
    uint64_t end = std::min(newest_, tx_);
    collect_overdue(base_ + 1, end, waited, now);
    scan_ = std::max(scan_, end);
    if (send_singles(overdue_, false, now) == 0 || !probed)
        return; // the ring is full (the next timeout asks again) or base_ never went
    std::array<std::byte, ROCE_ACK_FRAME> ack;
    uint32_t down_psn = uint32_t(cfg_.roce.down_base + base_ - 1) & ROCE_PSN_MASK;
    size_t len = build_roce_frame(ack, tmpl_.endpoint(), ROCE_OP_ACK, down_psn, false,
                                  ROCE_AETH_ACK, std::nullopt, {});
    roce_put_udp_csum(std::span(ack).first(len));
    std::array<std::span<const std::byte>, 1> span{std::span<const std::byte>(ack.data(), len)};
    if (transport_.send_batch(span) == 1) {
        ++stats_->packets_sent;
        stats_->bytes_sent += len;
    }
    probing_ = true;
    probe_before_ = now - waited;
}

// The first ACK after a probe: the leaf has taken our frames up to its PSN
// (the last index it took; base_ - 1 when it took nothing we wait for).
// What we sent beyond it a timeout before the probe did not make it: go
// back there.
void RoceEngine::on_probe_answer(const RoceFrameView &v, Clock::time_point now) {
    probing_ = false;
    int32_t d = from_base(v.psn, cfg_.roce.up_base);
    if (d < -1)
        return; // older than the oldest index we wait for
    uint64_t next = base_ + uint64_t(int64_t(d) + 1);
    if (next >= tx_)
        return; // the leaf has all we sent
    // A result of idx means the leaf took our frame idx: an ACK below the
    // newest result is an old one, delayed (a reordering path). Frames sent
    // less than a timeout before the probe may still be on their way (a
    // switch's receive queue, a CPU busy elsewhere): the leaf NAKs them if
    // one before them was lost. An old ACK that passes both sends us back
    // too early, which costs frames the leaf answers as duplicates.
    if ((next <= newest_ && newest_ < next_ && entry(newest_).resulted) ||
        entry(next).sent_at > probe_before_)
        return;
    cut_in_flight(next);
    go_back(next, now);
}

// Strict order, frames from `lost` on are to go again: what was in flight
// behind the loss is resent, so keep less in flight for a while. Once per
// loss: the NAKs and probe answers of frames built before the last cut
// (sent, or refused by a full ring and sent next) belong to it (NewReno's
// recovery point).
void RoceEngine::cut_in_flight(uint64_t lost) {
    if (lost < recover_)
        return;
    recover_ = next_;
    in_flight_ = std::max(std::min<uint64_t>(kMinLossWindow, window_), in_flight_ / 2);
    ++stats_->window_cuts;
}

// A new process continues the job's sequence where the switches stand
// (docs/ROCE.md "Consecutive runs"): the leaf names the index it expects
// next on our connection, and after a run that ended every rank stands at
// the same one. The start check, a Barrier at that index with an ImmDt no
// data collective has, completes only if every rank sent it there and no
// set on its way holds what a run stopped in the middle left; otherwise no
// rank gets past it, and each times out saying why.
void RoceEngine::start() {
    started_ = true;
    if (!cfg_.roce.start_handshake)
        return;
    std::optional<uint64_t> at = ask_where_we_stand();
    if (!at)
        return; // a switch without the handshake: the topology's bases
    base_ = next_ = tx_ = recover_ = *at;
    StartCheck check;
    CommStats scratch; // the caller's statistics are its collectives'
    checking_ = true;
    run(check, "start check", scratch);
    checking_ = false;
}

// The handshake's request: an ACK whose syndrome is ROCE_AETH_SYNC_REQ,
// again after each timeout. Returns the index the leaf expects next, or
// nothing if it never answered.
std::optional<uint64_t> RoceEngine::ask_where_we_stand() {
    std::array<std::byte, ROCE_ACK_FRAME> req;
    size_t len = build_roce_frame(req, tmpl_.endpoint(), ROCE_OP_ACK, 0, false, ROCE_AETH_SYNC_REQ,
                                  std::nullopt, {});
    roce_put_udp_csum(std::span(req).first(len));
    std::array<std::span<const std::byte>, 1> span{std::span<const std::byte>(req.data(), len)};
    Clock::duration rto = cfg_.timeout;
    for (uint32_t tries = 0; tries < kSyncTries; ++tries) {
        auto now = Clock::now();
        auto until = now + rto;
        bool sent = transport_.send_batch(span) == 1;
        for (;;) {
            size_t n = transport_.recv_views(recv_views_, max_frame_ + kRecvSlack);
            for (size_t i = 0; i < n; ++i)
                if (std::optional<uint64_t> at = where_we_stand(recv_views_[i]))
                    return at;
            throw_if_stopped(cfg_, "start handshake");
            now = Clock::now();
            if (now >= until)
                break;
            if (n == 0)
                transport_.wait(std::chrono::duration_cast<std::chrono::nanoseconds>(until - now),
                                !sent);
        }
        rto = std::min<Clock::duration>(2 * rto, cfg_.max_timeout);
    }
    return std::nullopt;
}

// The leaf's answer, if `frame` is it: the PSN it expects next from us
// (BTH) and the PSN of its next result to us (AETH's low 24 bits) name the
// same index of the job's sequence. Anything else (a frame of an earlier
// process, still on its way) is not.
std::optional<uint64_t> RoceEngine::where_we_stand(std::span<const std::byte> frame) const {
    RoceFrameView v;
    if (parse_roce(frame, v, true) != RoceParse::Ok || v.dqpn != cfg_.roce.local_qpn ||
        v.opcode != ROCE_OP_ACK || (*v.aeth & ROCE_AETH_SYNDROME_MASK) != ROCE_AETH_SYNC_ANS)
        return std::nullopt;
    uint32_t down_psn = *v.aeth & ROCE_AETH_MSN_MASK;
    uint32_t up = (v.psn - cfg_.roce.up_base) & ROCE_PSN_MASK;
    uint32_t down = (down_psn - cfg_.roce.down_base) & ROCE_PSN_MASK;
    if (up != down)
        throw std::runtime_error(fmt::format(
            "roce: rank {} of job {}: the leaf's connection (QPN {:#x}) expects PSN {:#08x} from "
            "us, idx {} from our base {:#08x}, but sends its next result at PSN {:#08x}, idx {} "
            "from our base {:#08x}: the switch's rules come from another topology than this "
            "rank's",
            cfg_.rank, cfg_.job, cfg_.roce.remote_qpn, v.psn, up, cfg_.roce.up_base, down_psn, down,
            cfg_.roce.down_base));
    return up;
}

void RoceEngine::fail_timeout(Clock::time_point now, bool retries) const {
    uint64_t idx = base_ < next_ ? base_ : next_;
    uint64_t k = idx - first_;
    const Entry &e = ring_[idx % ring_.size()];
    std::string why =
        retries ? fmt::format("gave up after {} retransmissions (max_retries)", retries_)
                : fmt::format("no result from the switch for {:.1f} s",
                              std::chrono::duration<double>(now - last_progress_).count());
    auto msg = fmt::format(
        "{} timed out: rank {} of {}, job {}: {}; stuck at idx {} (PSN {:#08x} up to QPN {:#x}, "
        "{:#08x} down to QPN {:#x}; packet {} of {} of this call, sent {} times, {} results "
        "taken) on {}. Check that all {} ranks run the same collectives with the same window "
        "and packet size, and that job {} was installed or reset (`incxdp rules apply`) "
        "before they started",
        what_, cfg_.rank, cfg_.world_size, cfg_.job, why, idx, up_psn(idx), cfg_.roce.remote_qpn,
        uint32_t(cfg_.roce.down_base + idx) & ROCE_PSN_MASK, cfg_.roce.local_qpn, k, end_ - first_,
        idx < next_ ? e.sends : 0, done_, transport_.describe(), cfg_.world_size, cfg_.job);
    if (checking_)
        msg = fmt::format(
            "start check timed out: rank {} of {}, job {}: {}; the ranks do not all stand at idx "
            "{} of the job's sequence, where this rank's leaf says its connection stands (QPN "
            "{:#x}, PSN {:#08x}) on {}. A run of job {} stopped in the middle (a rank killed or "
            "stopped), or not all {} ranks started: run `incxdp rules apply` (or `incxdp job "
            "reset`), then start every rank again",
            cfg_.rank, cfg_.world_size, cfg_.job, why, idx, cfg_.roce.remote_qpn, up_psn(idx),
            transport_.describe(), cfg_.job, cfg_.world_size);
    uint32_t pool = cfg_.roce.pool ? cfg_.roce.pool : window_;
    throw CommTimeout(msg, cfg_.rank, cfg_.job, uint32_t(idx % pool), idx);
}

} // namespace incxdp::detail
