// SPDX-License-Identifier: BSD-2-Clause
// A strict-order roce host (docs/ROCE.md §4) against a leaf the test plays
// by hand: every frame the engine sends is read here in order, and the
// answers (results, ACKs, NAKs) are the ones each case names, in the order
// it names. The soft switch model cannot produce these cases: it takes every
// frame the moment it is sent, so none is ever in flight, and its ACKs are
// never old.
// - RoceProbe: what the engine must not do with the answer to a timeout's
//   probe: go back over frames sent less than a timeout before the probe
//   (they may still be queued at a busy switch), or on an ACK below the
//   newest result (an old one, overtaken); and that it does go back when
//   the ACK shows a loss.
// - RoceLossWindow: the frames it keeps in flight after a loss, exactly:
//   halved once per loss (NAKs of frames sent before the cut are the same
//   loss), one more per that many results.
// - RoceFastRetransmit: when a missing result's frame goes again, to the
//   result, and what a late first result teaches.
// - RoceAnyOrder: a timeout of a host whose leaf takes its frames in any
//   order resends the frames sent a timeout ago without a result, only.
// No timing assertions: the timer is 100 ms and the script answers at once.
#include "held_frames_transport.h"
#include "pause_gate.h"
#include "roce_soft_switch.h"
#include "roce_test_config.h"
#include "test_data.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

using namespace incxdp;
using namespace incxdp::test;

namespace {

constexpr uint64_t kPackets = 64; // RoceProbe: one call, the whole window
constexpr auto kWaitFrame = std::chrono::seconds(3);

// The host's side of the link: frames the engine sends queue up for the
// script; frames the script delivers are what the engine receives. `room`
// is how many more frames the send ring takes (a full ring makes the engine
// wait for POLLOUT and send the rest later).
class ScriptedLink final : public HeldFramesTransport {
  public:
    static constexpr size_t kUnlimited = std::numeric_limits<size_t>::max();

    size_t send_batch(std::span<const std::span<const std::byte>> pkts) override {
        std::lock_guard lock(mu_);
        size_t n = std::min(pkts.size(), room_);
        for (size_t i = 0; i < n; ++i)
            sent_.emplace_back(pkts[i].begin(), pkts[i].end());
        if (room_ != kUnlimited)
            room_ -= n;
        cv_.notify_all();
        return n;
    }

    void wait(std::chrono::nanoseconds timeout, bool want_send) override {
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, timeout, [&] { return !inbox_.empty() || (want_send && room_ > 0); });
        lock.unlock();
        gate_.hold();
    }

    std::string describe() const override { return "scripted roce link"; }

    // The script's side.
    void set_room(size_t n) {
        std::lock_guard lock(mu_);
        room_ = n;
        cv_.notify_all();
    }
    /// The rank off the CPU until resume() (pause_gate.h).
    void pause() { gate_.pause(); }
    void resume() { gate_.resume(); }
    std::optional<std::vector<std::byte>> next_sent(std::chrono::nanoseconds within) {
        std::unique_lock lock(mu_);
        if (!cv_.wait_for(lock, within, [&] { return !sent_.empty(); }))
            return std::nullopt;
        auto f = std::move(sent_.front());
        sent_.pop_front();
        return f;
    }
    size_t unread() const {
        std::lock_guard lock(mu_);
        return sent_.size();
    }
    void deliver(std::vector<std::byte> f) {
        std::vector<std::vector<std::byte>> one;
        one.push_back(std::move(f));
        deliver(std::move(one));
    }
    /// At once: up to `batch` frames reach the engine in one receive.
    void deliver(std::vector<std::vector<std::byte>> frames) {
        std::lock_guard lock(mu_);
        for (auto &f : frames)
            inbox_.push_back(std::move(f));
        cv_.notify_all();
    }

  private:
    size_t take(std::vector<std::vector<std::byte>> &held, size_t max) override {
        std::lock_guard lock(mu_);
        return take_front(inbox_, held, gate_.paused() ? 0 : max);
    }

    mutable std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::vector<std::byte>> sent_, inbox_;
    size_t room_ = kUnlimited;
    PauseGate gate_;
};

struct Sent {
    uint64_t idx = 0; ///< SENDs: the index on the connection (from the PSN)
    uint8_t opcode = 0;
    bool ackreq = false;
};

// What recovery did over a call, checked by every case as one value (a
// failure prints all three).
struct Recovery {
    uint64_t timeouts = 0;
    uint64_t window_cuts = 0;
    uint64_t retransmissions = 0;
    bool operator==(const Recovery &) const = default;
};

[[maybe_unused]] void PrintTo(const Recovery &r, std::ostream *os) {
    *os << "{timeouts " << r.timeouts << ", window cuts " << r.window_cuts << ", retransmissions "
        << r.retransmissions << "}";
}

// One rank whose leaf is the test. The rank runs one AllReduce of `packets`
// packets on its own thread; the test reads what it sends (next()) and
// answers (result(), ack(), nak()).
class ScriptedRank {
  public:
    explicit ScriptedRank(uint64_t packets = kPackets, uint32_t window = uint32_t(kPackets),
                          bool any_order = false)
        : o_(options(window, any_order)), net_(o_.sw) {
        const SoftConn &k = net_.conn(0);
        auto link = std::make_unique<ScriptedLink>();
        link_ = link.get();
        comm_ = std::make_unique<Communicator>(roce_config(k, o_, 0), std::move(link));
        count_ = packets * comm_->config().effective_elems_per_packet();
        in_ = int_data(0, count_, 7);
        out_.assign(count_, 0);
    }
    ~ScriptedRank() {
        stop_ = true; // a failed script leaves the rank waiting: end it
        link_->resume();
        if (thread_.joinable())
            thread_.join();
    }

    ScriptedLink &link() { return *link_; }

    /// Starts the AllReduce and reads its first `first` SENDs (indices 0
    /// on); false if they were not those.
    bool start(uint64_t first) {
        thread_ = std::thread([this] {
            try {
                comm_->allreduce(in_.data(), out_.data(), count_, DType::Int32, ReduceOp::Sum);
            } catch (...) {
                err_ = std::current_exception();
            }
        });
        next_sends(0, first);
        return !testing::Test::HasFailure();
    }

    /// Waits for the AllReduce; it must have succeeded with one rank's sum
    /// (its own input) and left nothing unread on the link.
    void finish() {
        if (testing::Test::HasFailure())
            stop_ = true; // the script went wrong: do not wait for the deadline
        link_->resume();
        thread_.join();
        if (err_) {
            try {
                std::rethrow_exception(err_);
            } catch (const std::exception &e) {
                FAIL() << e.what();
            }
        }
        EXPECT_EQ(out_, in_);
        EXPECT_EQ(link_->unread(), 0u) << "frames sent after the last one the script expected";
    }

    /// The next frame the rank sent; fails the test if none comes.
    Sent next() {
        Sent s;
        auto f = link_->next_sent(kWaitFrame);
        if (!f) {
            ADD_FAILURE() << "the rank sent nothing more";
            return s;
        }
        detail::RoceFrameView v;
        EXPECT_EQ(detail::parse_roce(*f, v, true), detail::RoceParse::Ok);
        s.opcode = v.opcode;
        s.ackreq = v.ackreq;
        s.idx = (v.psn - net_.conn(0).up_base) & ROCE_PSN_MASK;
        if (s.opcode == ROCE_OP_SEND_ONLY_IMM)
            frames_[s.idx] = std::move(*f);
        return s;
    }

    /// Reads the next n frames: SENDs of the indices [from, from + n).
    void next_sends(uint64_t from, uint64_t n) {
        for (uint64_t i = 0; i < n && !testing::Test::HasFailure(); ++i) {
            Sent f = next();
            EXPECT_EQ(f.opcode, ROCE_OP_SEND_ONLY_IMM);
            EXPECT_EQ(f.idx, from + i) << "frame " << i << " from idx " << from;
        }
    }

    /// Reads the SENDs of [from, to) one by one, answering each with its
    /// result as soon as it is read (each lets the next go).
    void answer_each(uint64_t from, uint64_t to) {
        for (uint64_t idx = from; idx < to && !testing::Test::HasFailure(); ++idx) {
            EXPECT_EQ(next().idx, idx);
            result(idx);
        }
    }

    /// The probe: the frame of `idx` with AckReq, then `holes` (the frames
    /// resent with it), then the rank's ACK.
    void expect_probe(uint64_t idx, const std::vector<uint64_t> &holes) {
        Sent p = next();
        EXPECT_EQ(p.opcode, ROCE_OP_SEND_ONLY_IMM);
        EXPECT_EQ(p.idx, idx) << "the probe is the oldest frame without a result";
        EXPECT_TRUE(p.ackreq) << "the probe asks for an ACK";
        for (uint64_t h : holes)
            EXPECT_EQ(next().idx, h) << "a hole resent with the probe";
        EXPECT_EQ(next().opcode, ROCE_OP_ACK) << "the probe ends with the rank's own ACK";
    }

    /// The leaf's results for the SENDs of `idxs` (read by next() before),
    /// in that order, at once (a receive takes up to 64): one rank, so each
    /// sum is its payload.
    void results(const std::vector<uint64_t> &idxs) {
        std::vector<std::vector<std::byte>> out;
        for (uint64_t idx : idxs) {
            auto it = frames_.find(idx);
            if (it == frames_.end()) {
                ADD_FAILURE() << "idx " << idx << " was never read";
                return;
            }
            detail::RoceFrameView v;
            EXPECT_EQ(detail::parse_roce(it->second, v, true), detail::RoceParse::Ok);
            std::vector<std::byte> f(detail::kRoceImmPayloadOff + v.payload.size() + ROCE_ICRC_LEN);
            uint32_t psn = uint32_t(net_.conn(0).down_base + idx) & ROCE_PSN_MASK;
            f.resize(detail::build_roce_frame(f, net_.down_endpoint(0), ROCE_OP_SEND_ONLY_IMM, psn,
                                              false, std::nullopt, v.imm, v.payload));
            out.push_back(std::move(f));
        }
        link_->deliver(std::move(out));
    }
    void results(uint64_t from, uint64_t to) { results(range(from, to)); }
    void result(uint64_t idx) { results({idx}); }

    static std::vector<uint64_t> range(uint64_t from, uint64_t to) {
        std::vector<uint64_t> v;
        for (uint64_t i = from; i < to; ++i)
            v.push_back(i);
        return v;
    }

    /// The leaf's ACK: it has taken the rank's frames up to idx.
    void ack(uint64_t idx) { aeth(idx, ROCE_AETH_ACK | uint32_t(idx + 1)); }

    /// The leaf's NAK: it expects idx and drops what comes after it.
    void nak(uint64_t idx) { aeth(idx, ROCE_AETH_NAK_SEQ | uint32_t(idx)); }

    CommStats stats() const { return comm_->total_stats(); }
    Recovery recovery() const {
        CommStats s = stats();
        return {s.timeouts, s.window_cuts, s.retransmissions};
    }

  private:
    void aeth(uint64_t idx, uint32_t aeth) {
        std::vector<std::byte> f(ROCE_ACK_FRAME);
        uint32_t psn = uint32_t(net_.conn(0).up_base + idx) & ROCE_PSN_MASK;
        f.resize(detail::build_roce_frame(f, net_.down_endpoint(0), ROCE_OP_ACK, psn, false, aeth,
                                          std::nullopt, {}));
        link_->deliver(std::move(f));
    }

    RoceOptions options(uint32_t window, bool any_order) {
        RoceOptions o;
        o.sw.ranks = 1;
        o.sw.any_order = any_order;
        o.sw.pool = 1024;
        o.window = window;
        o.timeout = std::chrono::milliseconds(100);
        o.max_timeout = std::chrono::milliseconds(400);
        o.deadline = std::chrono::milliseconds(20000);
        o.stop = &stop_;
        return o;
    }

    std::atomic<bool> stop_{false};
    RoceOptions o_;
    SoftRoceNet net_; ///< only its connection's addresses, PSN bases and endpoints
    ScriptedLink *link_ = nullptr;
    std::unique_ptr<Communicator> comm_;
    size_t count_ = 0;
    std::vector<int32_t> in_, out_;
    std::map<uint64_t, std::vector<std::byte>> frames_; ///< the last copy of each SEND read
    std::thread thread_;
    std::exception_ptr err_;
};

} // namespace

// The control case: the leaf took idx 0-31 and nothing after (lost, or
// dropped behind a gap whose NAK was lost), and frames 32-63 went at the
// same time as the rest, before the timer started. The probe's answer sends
// the rank back to 32, once, with one cut of what it keeps in flight.
TEST(RoceProbe, AnAckBelowWhatWasSentBeforeTheTimerSendsBack) {
    ScriptedRank rank;
    if (!rank.start(kPackets))
        return;
    rank.expect_probe(0, {});
    rank.ack(31);
    rank.next_sends(32, kPackets - 32);
    rank.results(0, kPackets);
    rank.finish();
    // The probe, then 32-63 once.
    EXPECT_EQ(rank.recovery(), (Recovery{.timeouts = 1, .window_cuts = 1, .retransmissions = 33}));
    EXPECT_EQ(rank.stats().naks, 0u);
}

// A full send ring held frames 32-63 back; they went later, less than a
// timeout before the probe, and may still be queued at the switch: the
// leaf's ACK of 31 says nothing about them. The rank must not go back
// (83728d0: on tree1248 it went back and cut 70-230 times per rank per
// 256 MiB without a loss).
TEST(RoceProbe, FramesSentSinceTheTimerStartedAreNotSentBack) {
    ScriptedRank rank;
    rank.link().set_room(32);
    if (!rank.start(32))
        return;
    // Half the timer: the rest go well after it started, well before it
    // runs out.
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rank.link().set_room(ScriptedLink::kUnlimited);
    rank.next_sends(32, kPackets - 32);
    rank.expect_probe(0, {});
    rank.ack(31);
    rank.results(0, kPackets);
    rank.finish();
    // Nothing was lost: the probe only.
    EXPECT_EQ(rank.recovery(), (Recovery{.timeouts = 1, .window_cuts = 0, .retransmissions = 1}));
}

// Results for 0-9 and 20 came, none for 10-19: the probe resends 10 and
// the holes 11-19. The leaf's answer is an ACK of 19, older than the
// result of 20 (which needs 20 taken): an ACK overtaken on the way. The
// rank must not go back to 20.
TEST(RoceProbe, AnAckBelowTheNewestResultIsOldAndIgnored) {
    ScriptedRank rank;
    if (!rank.start(kPackets))
        return;
    rank.results(0, 10);
    rank.result(20);
    rank.expect_probe(10, {11, 12, 13, 14, 15, 16, 17, 18, 19});
    rank.ack(19);
    rank.results(10, 20);
    rank.results(21, kPackets);
    rank.finish();
    // The ACK was old: no cut; the probe and the holes went.
    EXPECT_EQ(rank.recovery(), (Recovery{.timeouts = 1, .window_cuts = 0, .retransmissions = 10}));
    EXPECT_EQ(rank.stats().fast_retransmits, 0u) << "20 is within the reordering limit of 10";
}

// The rank is off the CPU for longer than its timer while its answers queue
// up: 64 duplicate results (a receive's worth that moves nothing), an ACK
// of 127 the leaf sent before the results of 64-191 (its sets were still
// waiting then), and those results. The rank wakes with its timer past due.
// It must read all that came before it asks the leaf anything: a probe
// after the first receive takes the queued ACK for its answer and sends the
// rank back over 128-191, whose results are right behind it (the Tree124
// window-2048 runs that overflowed the AF_XDP ring did that).
TEST(RoceProbe, ATimerPastDueWaitsUntilTheQueuedAnswersAreRead) {
    constexpr uint64_t packets = 192;
    ScriptedRank rank(packets, 128);
    if (!rank.start(128))
        return;
    rank.results(0, 64);
    rank.next_sends(128, 64);
    rank.link().pause();
    rank.results(0, 64);
    rank.ack(127);
    rank.results(64, packets);
    // Twice the 100 ms timer, which restarted at the result of 63.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rank.link().resume();
    rank.finish();
    // Every answer was queued: nothing went again.
    EXPECT_EQ(rank.recovery(), Recovery{});
    EXPECT_EQ(rank.stats().duplicates, 64u);
}

// Strict order, window 512 (above the 128 a loss may cut to): a NAK of 100
// halves the frames in flight beyond the oldest index without a result to
// 256, so the go-back resends 100-255 and stops; each result lets one more
// go. A second NAK (300) for frames sent before the cut is the same loss:
// it sends the rank back without a second cut. 256 results after the cut
// add one: 257 in flight.
TEST(RoceLossWindow, HalvedOncePerLossAndGrownByOnePerWindowOfResults) {
    constexpr uint64_t packets = 1024;
    ScriptedRank rank(packets, 512);
    if (!rank.start(512))
        return;
    rank.nak(100);
    rank.next_sends(100, 156); // 100..255: base 0 + 256
    rank.results(0, 100);
    rank.next_sends(256, 100); // 256..355: base 100 + 256
    rank.nak(300);
    rank.next_sends(300, 56); // again 300..355, still 256 in flight
    rank.results(100, 356);
    rank.next_sends(356, 257); // 356..612: base 356 + 257
    rank.results(356, 613);
    rank.answer_each(613, packets);
    rank.finish();
    // One loss; 100..255, 256..355, 300..355 and 356..511 went again.
    EXPECT_EQ(rank.recovery(),
              (Recovery{.timeouts = 0, .window_cuts = 1, .retransmissions = 156 + 100 + 56 + 156}));
    EXPECT_EQ(rank.stats().naks, 2u);
}

// Fast retransmit, frame by frame (window 512, so the limit is the learnt
// reordering, not half of what is in flight). A missing result's frame goes
// again when 32 later results are in, not at 31: the frames that the
// oldest index's result lets go come first. Its result then comes twice,
// the first copy late by 32 (overtaken by 11..42): the rank learns to let
// 64 pass, and the next missing index (101) waits for 64 later results.
// Each time, results that would trigger a fast retransmit one too early
// come in one receive with one that moves the oldest index, so an early
// resend would come before the new frames.
TEST(RoceFastRetransmit, AfterThirtyTwoLaterResultsThenAfterWhatWasLearnt) {
    constexpr uint64_t packets = 1024;
    ScriptedRank rank(packets, 512);
    if (!rank.start(512))
        return;
    auto batch = ScriptedRank::range(0, 10); // 0..9, 11..41: 31 later than 10
    for (uint64_t i = 11; i < 42; ++i)
        batch.push_back(i);
    rank.results(batch);
    rank.next_sends(512, 10); // base 10 + 512: 512..521, and not 10
    rank.result(42);          // the 32nd later result
    Sent f = rank.next();
    EXPECT_EQ(f.idx, 10u) << "fast retransmit";
    EXPECT_FALSE(f.ackreq) << "not a timeout's probe";
    rank.results({10, 10});   // both copies: the first was late by 32
    rank.next_sends(522, 33); // base 43 + 512
    rank.results(43, 100);
    rank.next_sends(555, 57); // base 100 + 512
    // 100 first (late by 64 it would teach 128: a result that late is
    // reordering), then 63 later than 101.
    batch = {100};
    for (uint64_t i = 102; i < 165; ++i)
        batch.push_back(i);
    rank.results(batch);
    f = rank.next();
    EXPECT_EQ(f.idx, 612u) << "new frame first: 101 waits for 64 later results";
    rank.result(165);
    f = rank.next();
    EXPECT_EQ(f.idx, 101u) << "fast retransmit after 64";
    EXPECT_FALSE(f.ackreq) << "not a timeout's probe";
    rank.result(101);
    rank.results(166, 613);
    rank.answer_each(613, packets);
    rank.finish();
    EXPECT_EQ(rank.recovery(), (Recovery{.timeouts = 0, .window_cuts = 0, .retransmissions = 2}));
    CommStats s = rank.stats();
    EXPECT_EQ(s.fast_retransmits, 2u);
    EXPECT_EQ(s.reorder, 64u) << "twice the 32 that overtook 10's first result";
    EXPECT_EQ(s.duplicates, 1u);
}

// host_order any: the leaf has taken whatever arrived, so a timeout resends
// only the frames sent at least a timeout ago that have no result. A full
// send ring held 32..63 back for half the timer: at the first timeout, 20
// (sent with the first 32) goes again and 40 and 52..63 (sent later) do
// not; they go at the next one, once the oldest index is 40. Nothing else
// is sent: no probe, no ACK. (No result is 32 later than a missing one:
// that would be a fast retransmit.)
TEST(RoceAnyOrder, TimeoutResendsOnlyTheFramesSentATimeoutAgo) {
    ScriptedRank rank(kPackets, uint32_t(kPackets), true);
    rank.link().set_room(32);
    if (!rank.start(32))
        return;
    rank.results(0, 20);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    rank.link().set_room(ScriptedLink::kUnlimited);
    rank.next_sends(32, 32);
    auto later = ScriptedRank::range(21, 40);
    for (uint64_t i = 41; i < 52; ++i)
        later.push_back(i);
    rank.results(later);
    Sent f = rank.next();
    EXPECT_EQ(f.idx, 20u) << "the first timeout";
    EXPECT_EQ(f.opcode, ROCE_OP_SEND_ONLY_IMM);
    rank.result(20);
    f = rank.next();
    EXPECT_EQ(f.idx, 40u) << "the second timeout";
    rank.next_sends(52, 12);
    rank.result(40);
    rank.results(52, kPackets);
    rank.finish();
    // 40 and 52..63 waited for the second timeout.
    EXPECT_EQ(rank.recovery(), (Recovery{.timeouts = 2, .window_cuts = 0, .retransmissions = 14}));
    EXPECT_EQ(rank.stats().fast_retransmits, 0u);
}
