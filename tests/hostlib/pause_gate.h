// SPDX-License-Identifier: BSD-2-Clause
// The scheduler, played by a test: a rank whose transport is paused takes
// nothing from its receive queue and does not come back from a wait until it
// is resumed, whatever the wait's timeout, as a process off the CPU. What
// arrives meanwhile queues up; the rank's timers run past due.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>

namespace incxdp::test {

class PauseGate {
  public:
    void pause() {
        std::lock_guard lock(mu_);
        paused_ = true;
    }
    void resume() {
        std::lock_guard lock(mu_);
        paused_ = false;
        cv_.notify_all();
    }
    bool paused() const { return paused_; }
    /// The end of a transport's wait(): blocks while paused.
    void hold() {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return !paused_.load(); });
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::atomic<bool> paused_{false};
};

} // namespace incxdp::test
