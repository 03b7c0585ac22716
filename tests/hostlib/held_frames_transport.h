// SPDX-License-Identifier: BSD-2-Clause
// The receive side of the in-process test transports (the soft switch's
// loopback, the scripted leaf's link): frames arrive as byte vectors, a
// receive takes up to `max` of them into `held_` and hands them out by copy
// or by view (valid until the next receive).
#pragma once

#include <incxdp/transport.h>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <deque>
#include <span>
#include <vector>

namespace incxdp::test {

/// Replaces `out` with up to `max` frames from the front of `q`; returns
/// how many.
inline size_t take_front(std::deque<std::vector<std::byte>> &q,
                         std::vector<std::vector<std::byte>> &out, size_t max) {
    out.clear();
    while (!q.empty() && out.size() < max) {
        out.push_back(std::move(q.front()));
        q.pop_front();
    }
    return out.size();
}

class HeldFramesTransport : public Transport {
  public:
    size_t recv_batch(std::span<const std::span<std::byte>> bufs,
                      std::span<size_t> sizes) override {
        size_t n = take(held_, std::min(bufs.size(), sizes.size()));
        for (size_t i = 0; i < n; ++i) {
            sizes[i] = held_[i].size();
            std::memcpy(bufs[i].data(), held_[i].data(), std::min(held_[i].size(), bufs[i].size()));
        }
        return n;
    }

    size_t recv_views(std::span<std::span<const std::byte>> out, size_t) override {
        size_t n = take(held_, out.size());
        for (size_t i = 0; i < n; ++i)
            out[i] = held_[i];
        return n;
    }

  protected:
    /// Replaces `held` with up to `max` received frames; returns how many.
    virtual size_t take(std::vector<std::vector<std::byte>> &held, size_t max) = 0;

  private:
    std::vector<std::vector<std::byte>> held_;
};

} // namespace incxdp::test
