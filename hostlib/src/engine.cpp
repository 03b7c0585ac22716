// SPDX-License-Identifier: BSD-2-Clause
#include "engine.h"
#include "stop.h"

#include <fmt/format.h>

#include <algorithm>

namespace incxdp::detail {
namespace {

// Results are never larger than what we send; anything longer is not ours.
constexpr size_t kRecvSlack = 64;

} // namespace

Engine::Engine(const CommConfig &cfg, Transport &transport)
    : cfg_(cfg), transport_(transport), wire_(cfg.wire), hdr_len_(header_len(cfg.wire)),
      max_packet_(hdr_len_ + 4 * size_t(cfg.effective_elems_per_packet())),
      backlog_(cfg) {
    send_mem_.resize(size_t(cfg.window) * max_packet_);
    lanes_.resize(cfg.window);
    for (size_t l = 0; l < lanes_.size(); ++l)
        lanes_[l].buf = send_mem_.data() + l * max_packet_;

    max_result_ = max_packet_ + kRecvSlack;
    recv_views_.resize(cfg.batch);
    send_queue_.reserve(cfg.window);
    send_spans_.reserve(cfg.batch);
    lane_of_slot_.assign(cfg.window, -1);
}

void Engine::run(const Schedule &sched, std::span<const uint16_t> lane_slots,
                 std::span<const uint8_t> base_sets, const CallInfo &call, StepHandler &handler,
                 CommStats &stats) {
    if (sched.steps == 0)
        return;
    sched_ = &sched;
    call_ = &call;
    handler_ = &handler;
    stats_ = &stats;
    lane_slots_ = lane_slots;
    base_sets_ = base_sets;
    done_ = 0;
    send_queue_.clear();
    std::fill(lane_of_slot_.begin(), lane_of_slot_.end(), -1);
    for (uint32_t l = 0; l < sched.lanes; ++l) {
        lane_of_slot_[lane_slots[l]] = int32_t(l);
        lanes_[l].step = kIdle;
        lanes_[l].queued = false;
    }

    auto now = Clock::now();
    last_progress_ = now;
    next_timer_ = Clock::time_point::max();
    for (uint32_t l = 0; l < sched.lanes && l < sched.steps; ++l)
        start_step(l, l);
    flush(now);

    while (done_ < sched.steps) {
        size_t n = transport_.recv_views(recv_views_, max_result_);
        now = Clock::now();
        for (size_t i = 0; i < n; ++i) {
            ++stats.packets_received;
            stats.bytes_received += recv_views_[i].size();
            if (recv_views_[i].size() > max_result_)
                ++stats.malformed;
            else
                handle(recv_views_[i], now);
        }
        if (done_ == sched.steps)
            break;
        if (backlog_.drained(n) && now >= next_timer_)
            check_timers(now); // not while answers wait unread (rx_backlog.h)
        if (!send_queue_.empty())
            flush(now);
        if (now - last_progress_ >= cfg_.deadline)
            fail_timeout(now, 0);
        throw_if_stopped(cfg_, call_->what);
        if (n == 0) {
            auto until = std::min(next_timer_, last_progress_ + cfg_.deadline);
            auto wait = std::max(until - now, Clock::duration::zero());
            transport_.wait(std::chrono::duration_cast<std::chrono::nanoseconds>(wait),
                            !send_queue_.empty());
        }
    }
    for (uint32_t l = 0; l < sched.lanes; ++l)
        lanes_[l].step = kIdle;
}

void Engine::start_step(uint32_t lane, uint64_t step) {
    Lane &L = lanes_[lane];
    L.step = step;
    L.set = sched_->set_of(step, base_sets_[lane]);

    StepHeader h;
    h.job = cfg_.job;
    h.round = call_->round;
    h.chunk = uint32_t(step);
    h.rank = uint16_t(cfg_.rank);
    h.nworkers = uint16_t(cfg_.world_size);
    h.slot = lane_slots_[lane];
    h.set = L.set;
    h.op = call_->op;
    h.dtype = call_->dtype;
    handler_->build(step, lane, std::span(L.buf + hdr_len_, max_packet_ - hdr_len_), h.nelems,
                    h.exp);
    encode_data(wire_, h, std::span(L.buf, hdr_len_));

    L.nelems = h.nelems;
    L.len = hdr_len_ + 4 * size_t(h.nelems);
    L.retries = 0;
    L.timeout = cfg_.timeout;
    L.deadline = Clock::time_point::max();
    if (!L.queued) {
        L.queued = true;
        send_queue_.push_back(lane);
    }
}

void Engine::flush(Clock::time_point now) {
    // A lane whose last step finished while a retransmission was queued
    // has nothing left to send.
    std::erase_if(send_queue_, [this](uint32_t l) {
        if (lanes_[l].step != kIdle)
            return false;
        lanes_[l].queued = false;
        return true;
    });
    size_t head = 0;
    while (head < send_queue_.size()) {
        send_spans_.clear();
        size_t take = std::min<size_t>(cfg_.batch, send_queue_.size() - head);
        for (size_t k = 0; k < take; ++k) {
            const Lane &L = lanes_[send_queue_[head + k]];
            send_spans_.emplace_back(L.buf, L.len);
        }
        size_t sent = transport_.send_batch(send_spans_);
        for (size_t k = 0; k < sent; ++k) {
            Lane &L = lanes_[send_queue_[head + k]];
            L.queued = false;
            L.deadline = now + L.timeout;
            next_timer_ = std::min(next_timer_, L.deadline);
            ++stats_->packets_sent;
            stats_->bytes_sent += L.len;
        }
        head += sent;
        if (sent < take)
            break; // send buffer full: wait for POLLOUT
    }
    send_queue_.erase(send_queue_.begin(), send_queue_.begin() + ptrdiff_t(head));
}

void Engine::handle(std::span<const std::byte> pkt, Clock::time_point now) {
    auto r = decode_result(wire_, pkt);
    uint32_t job = wire_ == Wire::Native ? cfg_.job : (cfg_.job & 0xff);
    if (!r || r->job != job) {
        ++stats_->malformed;
        return;
    }
    if (r->slot >= lane_of_slot_.size() || lane_of_slot_[r->slot] < 0) {
        ++stats_->stale; // a slot this call does not use
        return;
    }
    uint32_t lane = uint32_t(lane_of_slot_[r->slot]);
    Lane &L = lanes_[lane];
    uint32_t round = r->tagged ? call_->round & 0xff : call_->round;
    uint32_t chunk = r->tagged ? uint32_t(L.step) & 0xffffff : uint32_t(L.step);
    if (r->round != round) {
        ++stats_->stale;
        return;
    }
    if (L.step == kIdle || r->set != L.set || r->chunk != chunk) {
        ++stats_->duplicates;
        return;
    }
    if (r->nelems != L.nelems) {
        ++stats_->malformed;
        return;
    }

    handler_->consume(L.step, lane, *r);
    ++stats_->results;
    ++done_;
    last_progress_ = now;
    uint64_t next = L.step + sched_->lanes;
    L.step = kIdle;
    L.deadline = Clock::time_point::max();
    if (next < sched_->steps)
        start_step(lane, next);
}

void Engine::check_timers(Clock::time_point now) {
    next_timer_ = Clock::time_point::max();
    for (uint32_t l = 0; l < sched_->lanes; ++l) {
        Lane &L = lanes_[l];
        if (L.step == kIdle || L.queued)
            continue;
        if (L.deadline > now) {
            next_timer_ = std::min(next_timer_, L.deadline);
            continue;
        }
        ++stats_->timeouts;
        if (cfg_.max_retries != 0 && L.retries >= cfg_.max_retries)
            fail_timeout(now, l + 1);
        ++L.retries;
        ++stats_->retransmissions;
        L.timeout = std::min<Clock::duration>(2 * L.timeout, cfg_.max_timeout);
        L.deadline = Clock::time_point::max();
        L.queued = true;
        send_queue_.push_back(l);
    }
}

void Engine::fail_timeout(Clock::time_point now, uint32_t lane_plus_one) const {
    // Name the given lane, else the one holding the oldest pending step.
    uint32_t lane = 0;
    if (lane_plus_one != 0) {
        lane = lane_plus_one - 1;
    } else {
        for (uint32_t l = 0; l < sched_->lanes; ++l)
            if (lanes_[l].step < lanes_[lane].step)
                lane = l;
    }
    const Lane &L = lanes_[lane];
    uint16_t slot = lane_slots_[lane];
    auto chunk = sched_->chunk_of(L.step);
    std::string what_step =
        chunk ? fmt::format("chunk {}", *chunk)
              : (sched_->warmup ? fmt::format("the exponent warm-up of chunk {}", L.step)
                                : fmt::format("step {}", L.step));
    std::string why =
        lane_plus_one != 0
            ? fmt::format("gave up after {} retransmissions (max_retries)", L.retries)
            : fmt::format("no result from the switch for {:.1f} s",
                          std::chrono::duration<double>(now - last_progress_).count());
    auto msg = fmt::format(
        "{} timed out: rank {} of {}, job {}: {}; stuck at slot {} set {}, {} (round {}, sent "
        "{} times, {} of {} steps done) on {}. Check that all {} ranks run the same collective "
        "with the same window/packet size and that job {} is installed on the switch",
        call_->what, cfg_.rank, cfg_.world_size, cfg_.job, why, slot, int(L.set), what_step,
        call_->round, L.retries + 1, done_, sched_->steps, transport_.describe(), cfg_.world_size,
        cfg_.job);
    throw CommTimeout(msg, cfg_.rank, cfg_.job, slot, chunk ? *chunk : L.step);
}

} // namespace incxdp::detail
