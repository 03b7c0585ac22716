// SPDX-License-Identifier: BSD-2-Clause
#include "xsk_live_tx.h"

#include <incxdp/xsk.h>

#include <bpf/bpf.h>
#include <fmt/format.h>
#include <linux/bpf.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <system_error>

namespace incxdp::detail {
namespace {

constexpr size_t kEthHdrLen = 14;
constexpr size_t kDataOff = offsetof(incxdp_xsk_tx_frame, data);

} // namespace

LiveTx::LiveTx(int prog_fd, int map_fd, std::string describe)
    : prog_fd_(prog_fd), describe_(std::move(describe)), tmpl_(kEthHdrLen) {
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(map_fd, &info, &len) != 0)
        throw std::system_error(errno, std::generic_category(),
                                fmt::format("{}: info of " INCXDP_XSK_TX_MAP, describe_));
    if (info.value_size != sizeof(incxdp_xsk_tx_frame) || info.max_entries < 2 ||
        !(info.map_flags & BPF_F_MMAPABLE))
        throw std::system_error(EINVAL, std::generic_category(),
                                fmt::format("{}: " INCXDP_XSK_TX_MAP " has {} B values and {} "
                                            "entries (incxdp/xsk.h wants {} B, mmapable)",
                                            describe_, info.value_size, info.max_entries,
                                            sizeof(incxdp_xsk_tx_frame)));
    elem_ = (size_t(info.value_size) + 7) & ~size_t(7); // array elements are 8-byte aligned
    slots_ = info.max_entries - 1;
    slot_bytes_ = INCXDP_XSK_TX_FRAME_MAX;
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    map_size_ = (elem_ * info.max_entries + page - 1) / page * page;
    void *mem = mmap(nullptr, map_size_, PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
    if (mem == MAP_FAILED)
        throw std::system_error(errno, std::generic_category(),
                                fmt::format("{}: mmap " INCXDP_XSK_TX_MAP, describe_));
    mem_ = static_cast<std::byte *>(mem);
    const uint32_t armed = INCXDP_XSK_TX_ARMED;
    std::memcpy(mem_ + offsetof(incxdp_xsk_tx_frame, ifindex), &armed, 4);
}

LiveTx::~LiveTx() {
    if (mem_)
        munmap(mem_, map_size_);
}

size_t LiveTx::capacity(size_t want) const {
    return std::min<size_t>(want, slots_);
}

// Slot 0 is the control slot; frame slot k is map entry 1 + k.
std::byte *LiveTx::data(size_t i) {
    return mem_ + (1 + (next_ + i) % slots_) * elem_ + kDataOff;
}

void LiveTx::set(size_t i, uint32_t len, uint32_t ifindex) {
    std::byte *e = mem_ + (1 + (next_ + i) % slots_) * elem_;
    std::memcpy(e + offsetof(incxdp_xsk_tx_frame, len), &len, 4);
    std::memcpy(e + offsetof(incxdp_xsk_tx_frame, ifindex), &ifindex, 4);
}

int LiveTx::bpf_run(size_t n, const std::vector<std::byte> &tmpl) {
    // The control slot's len: the frame slot the runs start at.
    std::memcpy(mem_ + offsetof(incxdp_xsk_tx_frame, len), &next_, 4);
    bpf_test_run_opts o{};
    o.sz = sizeof(o);
    o.data_in = tmpl.data();
    o.data_size_in = uint32_t(tmpl.size());
    o.repeat = int(n);
    o.flags = BPF_F_TEST_XDP_LIVE_FRAMES;
    o.batch_size = uint32_t(std::min<size_t>(n, 256));
    return bpf_prog_test_run_opts(prog_fd_, &o);
}

int LiveTx::run(size_t n) {
    if (n == 0)
        return 0;
    int err = bpf_run(n, tmpl_);
    if (err == 0)
        next_ = uint32_t((next_ + n) % slots_);
    else if (err != -EINTR && err != -EAGAIN && err != -ENOMEM)
        throw std::system_error(-err, std::generic_category(),
                                fmt::format("{}: BPF_PROG_RUN (live frames)", describe_));
    return err;
}

int LiveTx::try_probe(size_t max_frame) {
    if (max_frame > slot_bytes_)
        return -EINVAL;
    set(0, 0, 0); // an empty slot: the program drops the probe
    if (int err = bpf_run(1, std::vector<std::byte>(max_frame)))
        return err;
    next_ = (next_ + 1) % slots_;
    return 0;
}

} // namespace incxdp::detail
