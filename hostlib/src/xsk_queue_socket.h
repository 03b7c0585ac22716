// SPDX-License-Identifier: BSD-2-Clause
// One AF_XDP socket (zero-copy where the driver has it, else copy, as on
// veth) on one rx queue of an interface, with its own
// umem: the AF_XDP transport keeps one per queue that frames for the worker
// arrive on (docs/HOSTLIB.md §5). RAII: the socket, the umem and its memory
// go with the object.
#pragma once

#include <xdp/xsk.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace incxdp::detail {

struct XskQueueConfig {
    std::string ifname;
    uint32_t queue = 0;
    uint32_t frame_size = 4096;
    uint32_t rx_frames = 1024; ///< umem frames [0, rx_frames) start in the fill ring
    uint32_t tx_frames = 0;    ///< umem frames after them for a tx ring; 0: no tx ring
    size_t batch = 64;         ///< most descriptors one receive hands out
    std::string describe;      ///< the transport, for error messages
};

class XskQueueSocket {
  public:
    /// Creates the umem and the socket (XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD:
    /// the caller's program steers to it) and fills the fill ring. Throws
    /// std::system_error naming the queue and what failed.
    explicit XskQueueSocket(const XskQueueConfig &cfg);
    ~XskQueueSocket();
    XskQueueSocket(const XskQueueSocket &) = delete;
    XskQueueSocket &operator=(const XskQueueSocket &) = delete;

    uint32_t queue() const { return cfg_.queue; }
    const XskQueueConfig &config() const { return cfg_; }
    bool zero_copy() const { return zero_copy_; }
    int fd() const { return xsk_socket__fd(xsk_); }
    std::byte *frame(uint64_t addr) const {
        return static_cast<std::byte *>(xsk_umem__get_data(area_, addr));
    }

    /// Up to `max` (at most the batch) received frames, appended to `out`;
    /// they stay valid until release(), which must come before the next peek.
    void peek(size_t max, std::vector<std::span<const std::byte>> &out);
    /// The frames of the last peek back to the fill ring.
    void release();
    /// The kernel's drops on this socket (XDP_STATISTICS: rx_dropped +
    /// rx_ring_full).
    uint64_t dropped() const;

    /// The tx ring and completion ring, if tx_frames > 0.
    xsk_ring_prod &tx() { return tx_; }
    xsk_ring_cons &comp() { return comp_; }

  private:
    void open_socket();
    void teardown();

    XskQueueConfig cfg_;
    void *area_ = nullptr;
    size_t size_ = 0;
    xsk_umem *umem_ = nullptr;
    xsk_socket *xsk_ = nullptr;
    // libxdp keeps pointers to these: the object never moves (the transport
    // holds it by unique_ptr).
    xsk_ring_prod fill_{}, tx_{};
    xsk_ring_cons comp_{}, rx_{};
    bool zero_copy_ = false;
    uint32_t held_ = 0;
    std::vector<uint64_t> held_addrs_;
};

} // namespace incxdp::detail
