// SPDX-License-Identifier: BSD-2-Clause
// Tx-ring sending: frames written into umem frames of an AF_XDP socket and
// handed to the kernel through its tx ring, then sendto() (copy mode, as on
// veth: the kernel builds an skb per frame and sends it through the
// interface's normal transmit path). The other AF_XDP sender beside LiveTx
// (xsk_live_tx.h); it has no fixed cost per call, and works where the
// interface cannot transmit XDP frames. Both AF_XDP transports use it.
// docs/PERF.md.
#pragma once

#include "frame.h"
#include "xsk_queue_socket.h"

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace incxdp::detail {

class RingTx {
  public:
    /// `sock` is borrowed: it must outlive this object and have a tx ring
    /// (tx_frames > 0), whose umem frames (those after the rx ones) this
    /// object owns. Throws std::invalid_argument if it has none.
    explicit RingTx(XskQueueSocket &sock);
    RingTx(const RingTx &) = delete;
    RingTx &operator=(const RingTx &) = delete;

    /// Bytes a frame holds (the umem frame).
    size_t frame_bytes() const { return frame_size_; }
    /// Takes back frames the kernel has sent, then reserves up to `want`
    /// descriptors of the tx ring, each with a free frame; returns how many
    /// (0 when every frame is in flight). Every reserved one must be
    /// submitted before the next reserve.
    size_t reserve(size_t want);
    /// Frame i (< reserved) of the next submit: write it here, then set() it.
    std::byte *data(size_t i) { return sock_.frame(addr(i)); }
    /// Frame i is `len` bytes.
    void set(size_t i, uint32_t len);
    /// Hands every reserved frame to the kernel and kicks it to send them.
    void submit();
    /// Makes the kernel send what is still in the tx ring (copy mode sends
    /// only inside sendto(), a budget of frames per call).
    void kick();
    /// Frames in the tx ring the kernel has not taken yet.
    bool pending();
    /// Frames the kernel has sent back to the free stack.
    void reap();

  private:
    uint64_t addr(size_t i) const { return addrs_[i]; }

    XskQueueSocket &sock_;
    uint32_t frame_size_;
    FrameStack free_;
    std::vector<uint64_t> addrs_; ///< the frames of the reserved descriptors
    uint32_t idx_ = 0;            ///< the first reserved descriptor
};

} // namespace incxdp::detail
