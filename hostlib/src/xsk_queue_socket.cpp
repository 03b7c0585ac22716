// SPDX-License-Identifier: BSD-2-Clause
#include "xsk_queue_socket.h"

#include <fmt/format.h>
#include <linux/if_link.h>
#include <linux/if_xdp.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <system_error>

#ifndef SOL_XDP
#define SOL_XDP 283
#endif
#ifndef XDP_MAX_TX_SKB_BUDGET
#define XDP_MAX_TX_SKB_BUDGET 9 // Linux 6.17+: frames per sendto in copy mode (default 32)
#endif

namespace incxdp::detail {
namespace {

uint32_t pow2_at_least(uint32_t n) {
    uint32_t p = 1;
    while (p < n)
        p <<= 1;
    return p;
}

} // namespace

XskQueueSocket::XskQueueSocket(const XskQueueConfig &cfg) : cfg_(cfg) {
    try {
        open_socket();
    } catch (...) {
        teardown();
        throw;
    }
}

XskQueueSocket::~XskQueueSocket() { teardown(); }

void XskQueueSocket::open_socket() {
    auto fail = [&](int err, const std::string &what) {
        throw std::system_error(err, std::generic_category(),
                                fmt::format("{}: rx queue {}: {}", cfg_.describe, cfg_.queue, what));
    };
    size_t frames = size_t(cfg_.rx_frames) + cfg_.tx_frames;
    size_t size = frames * cfg_.frame_size;
    void *mem = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (mem == MAP_FAILED)
        fail(errno, fmt::format("mmap umem of {} B", size));
    area_ = mem;
    size_ = size;

    xsk_umem_config ucfg{};
    ucfg.fill_size = pow2_at_least(cfg_.rx_frames);
    ucfg.comp_size = pow2_at_least(std::max<uint32_t>(cfg_.tx_frames, 1));
    ucfg.frame_size = cfg_.frame_size;
    ucfg.frame_headroom = 0;
    ucfg.flags = 0;
    if (int err = xsk_umem__create(&umem_, area_, size_, &fill_, &comp_, &ucfg))
        fail(-err, "create umem");

    xsk_socket_config scfg{};
    scfg.rx_size = pow2_at_least(cfg_.rx_frames);
    scfg.tx_size = pow2_at_least(std::max<uint32_t>(cfg_.tx_frames, 1));
    scfg.libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD;
    scfg.xdp_flags = XDP_FLAGS_DRV_MODE;
    // Neither XDP_COPY nor XDP_ZEROCOPY: the kernel binds zero-copy where
    // the driver has it (a NIC's AF_XDP support) and falls back to copy
    // where not (veth).
    scfg.bind_flags = XDP_USE_NEED_WAKEUP;
    // EBUSY: the queue still holds the buffer pool of a socket closed a
    // moment ago (the kernel releases it from a work item), e.g. the
    // previous worker process on this interface. It clears in
    // milliseconds; give it a few seconds.
    int err = 0;
    for (int attempt = 0; attempt < 150; ++attempt) {
        err = xsk_socket__create(&xsk_, cfg_.ifname.c_str(), cfg_.queue, umem_, &rx_,
                                 cfg_.tx_frames ? &tx_ : nullptr, &scfg);
        if (err != -EBUSY)
            break;
        xsk_ = nullptr;
        ::usleep(20000);
    }
    if (err)
        fail(-err, std::string("create AF_XDP socket") +
                       (err == -EBUSY ? " (queue still busy: another AF_XDP socket on it?)" : ""));
    xdp_options opts{};
    socklen_t optlen = sizeof(opts);
    if (getsockopt(fd(), SOL_XDP, XDP_OPTIONS, &opts, &optlen) == 0)
        zero_copy_ = opts.flags & XDP_OPTIONS_ZEROCOPY;
    if (cfg_.tx_frames) {
        // More frames per sendto in copy mode where the kernel allows it.
        int budget = int(std::max<size_t>(cfg_.batch, 32));
        (void)setsockopt(fd(), SOL_XDP, XDP_MAX_TX_SKB_BUDGET, &budget, sizeof(budget));
    }

    // Every rx frame starts in the fill ring.
    uint32_t idx = 0;
    if (xsk_ring_prod__reserve(&fill_, cfg_.rx_frames, &idx) != cfg_.rx_frames)
        fail(ENOSPC, "fill ring");
    for (uint32_t i = 0; i < cfg_.rx_frames; ++i)
        *xsk_ring_prod__fill_addr(&fill_, idx + i) = uint64_t(i) * cfg_.frame_size;
    xsk_ring_prod__submit(&fill_, cfg_.rx_frames);
    held_addrs_.resize(std::max<size_t>(cfg_.batch, 1));
}

void XskQueueSocket::teardown() {
    if (xsk_)
        xsk_socket__delete(xsk_);
    xsk_ = nullptr;
    if (umem_)
        xsk_umem__delete(umem_);
    umem_ = nullptr;
    if (area_)
        munmap(area_, size_);
    area_ = nullptr;
}

void XskQueueSocket::peek(size_t max, std::vector<std::span<const std::byte>> &out) {
    uint32_t idx = 0;
    uint32_t n = xsk_ring_cons__peek(&rx_, uint32_t(std::min(max, held_addrs_.size())), &idx);
    held_ = n;
    for (uint32_t i = 0; i < n; ++i) {
        const xdp_desc *d = xsk_ring_cons__rx_desc(&rx_, idx + i);
        held_addrs_[i] = d->addr;
        out.emplace_back(frame(d->addr), d->len);
    }
}

void XskQueueSocket::release() {
    if (!held_)
        return;
    uint32_t idx = 0;
    uint32_t n = xsk_ring_prod__reserve(&fill_, held_, &idx);
    // The fill ring holds every rx frame, so there is always room.
    for (uint32_t i = 0; i < n; ++i)
        *xsk_ring_prod__fill_addr(&fill_, idx + i) = held_addrs_[i] & ~uint64_t(cfg_.frame_size - 1);
    xsk_ring_prod__submit(&fill_, n);
    xsk_ring_cons__release(&rx_, held_);
    held_ = 0;
    // Zero-copy: a driver that ran out of fill-ring frames waits to be told
    // there are new ones (XDP_USE_NEED_WAKEUP); copy mode never asks.
    if (zero_copy_ && xsk_ring_prod__needs_wakeup(&fill_))
        (void)recvfrom(fd(), nullptr, 0, MSG_DONTWAIT, nullptr, nullptr);
}

uint64_t XskQueueSocket::dropped() const {
    xdp_statistics st{};
    socklen_t len = sizeof(st);
    if (getsockopt(fd(), SOL_XDP, XDP_STATISTICS, &st, &len) != 0)
        throw std::system_error(errno, std::generic_category(),
                                fmt::format("{}: rx queue {}: getsockopt XDP_STATISTICS", cfg_.describe,
                                            cfg_.queue));
    return st.rx_dropped + st.rx_ring_full;
}

} // namespace incxdp::detail
