// SPDX-License-Identifier: BSD-2-Clause
#include "xsk_ring_tx.h"

#include <fmt/format.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace incxdp::detail {

RingTx::RingTx(XskQueueSocket &sock)
    : sock_(sock), frame_size_(sock.config().frame_size),
      free_(sock.config().rx_frames, sock.config().tx_frames, sock.config().frame_size) {
    if (sock.config().tx_frames == 0)
        throw std::invalid_argument(fmt::format("{}: rx queue {}: no tx ring (tx_frames = 0)",
                                                sock.config().describe, sock.queue()));
    addrs_.reserve(sock.config().tx_frames);
}

void RingTx::reap() {
    xsk_ring_cons &comp = sock_.comp();
    uint32_t idx = 0;
    const uint32_t n = xsk_ring_cons__peek(&comp, free_.capacity(), &idx);
    for (uint32_t i = 0; i < n; ++i)
        free_.push(*xsk_ring_cons__comp_addr(&comp, idx + i));
    if (n)
        xsk_ring_cons__release(&comp, n);
}

size_t RingTx::reserve(size_t want) {
    reap();
    addrs_.clear();
    const uint32_t n = uint32_t(std::min(want, free_.available()));
    // The ring has a descriptor for every frame (its size is at least
    // tx_frames), so room for n free frames is always there.
    if (n == 0 || xsk_ring_prod__reserve(&sock_.tx(), n, &idx_) != n)
        return 0;
    for (uint32_t i = 0; i < n; ++i)
        addrs_.push_back(*free_.pop());
    for (uint32_t i = 0; i < n; ++i)
        xsk_ring_prod__tx_desc(&sock_.tx(), idx_ + i)->addr = addrs_[i];
    return n;
}

void RingTx::set(size_t i, uint32_t len) {
    xsk_ring_prod__tx_desc(&sock_.tx(), idx_ + uint32_t(i))->len = len;
}

void RingTx::submit() {
    if (addrs_.empty())
        return;
    xsk_ring_prod__submit(&sock_.tx(), uint32_t(addrs_.size()));
    addrs_.clear();
    kick();
}

bool RingTx::pending() {
    xsk_ring_prod &ring = sock_.tx();
    return xsk_prod_nb_free(&ring, ring.size) != ring.size;
}

// Copy mode sends only inside sendto(), at most a budget of frames per
// call: call again while the kernel takes frames.
void RingTx::kick() {
    for (int i = 0; i < 64; ++i) {
        xsk_ring_prod &ring = sock_.tx();
        if (!pending())
            return; // all taken
        const uint32_t before = *ring.consumer;
        if (::sendto(sock_.fd(), nullptr, 0, MSG_DONTWAIT, nullptr, 0) >= 0)
            continue;
        if (errno == EAGAIN || errno == EBUSY || errno == ENOBUFS || errno == EINTR) {
            // EBUSY: the device dropped a frame (a retransmission recovers it).
            if (*ring.consumer == before)
                return; // no progress: wait for POLLOUT
            continue;
        }
        if (errno == ENETDOWN || errno == ENXIO)
            return; // link down: the retransmission timer keeps trying
        throw std::system_error(errno, std::generic_category(),
                                fmt::format("{}: rx queue {}: sendto (tx kick)",
                                            sock_.config().describe, sock_.queue()));
    }
}

} // namespace incxdp::detail
