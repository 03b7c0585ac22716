// SPDX-License-Identifier: BSD-2-Clause
// When an engine's retransmission timers may run: only once the receive
// queue has been read to the end.
//
// A timer means "no answer for a timeout". A rank that was off the CPU for
// longer than that (4 ranks and the switches' softirqs on 2 CPUs) wakes with
// its timer past due and the answers it waited for unread in its receive
// ring. Fired after the first batch, the timer resends frames whose results
// are queued behind it, and a RoCE probe takes an ACK from that queue, sent
// before the probe, for its answer and goes back over the whole window. The
// duplicates it draws overflowed the AF_XDP ring (Tree124 with window 2048:
// 35-870 frames dropped by the kernel, 580-2900 duplicate results per rank).
// So the timers run after a receive that came back short of a full batch.
// A peer that keeps the queue full must not silence them for good: after
// `max_full` full batches in a row they run anyway.
#pragma once

#include <incxdp/communicator.h>

#include <cstddef>
#include <cstdint>

namespace incxdp::detail {

/// The frames a rank's receive queue is sized for (the AF_XDP rings and
/// umem a Communicator opens; the engines' bound below). Every packet of
/// the window can have its result (and an ACK per ack_every) land while the
/// rank is not running: with 4 ranks on 2 CPUs that is the common case, and
/// a full ring drops the rest, which comes back only by retransmission
/// (strict go-back-N: with everything sent after it). A recovery doubles
/// that: each frame resent while its result is still on the way draws a
/// second copy (fast retransmits of late results, a go-back over frames the
/// leaf had taken). With 1.25 windows and a batch, tree124 at window 2048
/// still dropped 80 frames in one of ten 256 MiB runs, in one whose ranks
/// fast-retransmitted 500-1000 frames each. So: two windows and a batch
/// (16 MiB of 4 KiB frames at window 2048).
inline uint32_t rx_queue_frames(const CommConfig &cfg) {
    return 2 * cfg.window + uint32_t(cfg.batch);
}

class RxBacklog {
  public:
    /// `batch`: frames one receive takes at most; `frames`: how many the
    /// receive queue can hold (more full batches than it takes to read
    /// them all means the queue is being refilled as fast as it is read).
    RxBacklog(size_t batch, size_t frames)
        : batch_(batch), max_full_(batch ? frames / batch + 1 : 0) {}
    explicit RxBacklog(const CommConfig &cfg) : RxBacklog(cfg.batch, rx_queue_frames(cfg)) {}

    /// After a receive of `n` frames: whether everything that had arrived
    /// has been read, so that the timers may run.
    bool drained(size_t n) {
        if (n < batch_ || ++full_ > max_full_) {
            full_ = 0;
            return true;
        }
        return false;
    }

  private:
    size_t batch_;
    size_t max_full_;
    size_t full_ = 0;
};

} // namespace incxdp::detail
