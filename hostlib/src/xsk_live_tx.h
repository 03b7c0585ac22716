// SPDX-License-Identifier: BSD-2-Clause
// Live-frame sending (bpf/lib/xsk_tx.h): whole frames written into an XDP
// program's mmapped incxdp_tx_frames, then one BPF_PROG_RUN with
// BPF_F_TEST_XDP_LIVE_FRAMES that redirects each out of the interface its
// slot names. The AF_XDP transports' sender (afxdp_transport.cpp,
// afxdp_peers_transport.cpp): incxdp_xsk for one peer, the mesh relay for
// several. docs/PERF.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace incxdp::detail {

class LiveTx {
  public:
    /// `prog_fd` (an attached program that holds the map) and `map_fd`
    /// (its incxdp_tx_frames) are borrowed: they must outlive this object.
    /// Maps the slots; throws std::system_error naming `describe`.
    LiveTx(int prog_fd, int map_fd, std::string describe);
    ~LiveTx();
    LiveTx(const LiveTx &) = delete;
    LiveTx &operator=(const LiveTx &) = delete;

    /// Bytes a slot holds.
    size_t slot_bytes() const { return slot_bytes_; }
    /// How many of `want` frames one run takes.
    size_t capacity(size_t want) const;
    /// Frame i (< capacity) of the next run: write it here, then set() it.
    std::byte *data(size_t i);
    /// Frame i is `len` bytes and leaves by `ifindex` (0: the program's
    /// default interface, if it has one).
    void set(size_t i, uint32_t len, uint32_t ifindex);
    /// Sends frames [0, n) of the next run: 0, or -errno (EINTR, EAGAIN,
    /// ENOMEM: nothing sent, try again).
    int run(size_t n);
    /// One run with a template of `max_frame` bytes and an empty slot (the
    /// program drops it): a frame too long for one page fails here (-EINVAL)
    /// rather than every frame later. 0 or -errno.
    int try_probe(size_t max_frame);

  private:
    int bpf_run(size_t n, const std::vector<std::byte> &tmpl);

    int prog_fd_;
    std::string describe_;
    std::byte *mem_ = nullptr;
    size_t map_size_ = 0, elem_ = 0, slot_bytes_ = 0;
    uint32_t slots_ = 0; ///< frame slots (the map's entries but the control slot)
    uint32_t next_ = 0;  ///< frame slot the next run starts at
    std::vector<std::byte> tmpl_;
};

} // namespace incxdp::detail
