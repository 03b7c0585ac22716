// SPDX-License-Identifier: BSD-2-Clause
// Transport::recv_views() for transports that only implement recv_batch(),
// and recv_batch() for those that only implement recv_views().
#include <incxdp/transport.h>

#include <algorithm>
#include <cstring>

namespace incxdp {

size_t Transport::recv_views(std::span<std::span<const std::byte>> out, size_t max_len) {
    size_t n = out.size(), len = max_len + 1;
    if (view_bufs_.size() != n || (n && view_bufs_[0].size() != len)) {
        view_mem_.assign(n * len, std::byte{0});
        view_bufs_.clear();
        for (size_t i = 0; i < n; ++i)
            view_bufs_.emplace_back(view_mem_.data() + i * len, len);
        view_sizes_.assign(n, 0);
    }
    size_t got = recv_batch(view_bufs_, view_sizes_);
    for (size_t i = 0; i < got; ++i)
        out[i] = std::span<const std::byte>(view_bufs_[i].data(),
                                            std::min(view_sizes_[i], view_bufs_[i].size()));
    return got;
}

size_t Transport::recv_batch_from_views(std::span<const std::span<std::byte>> bufs,
                                        std::span<size_t> sizes) {
    size_t n = std::min(bufs.size(), sizes.size());
    batch_views_.resize(n);
    n = recv_views(std::span(batch_views_).first(n), 0);
    for (size_t i = 0; i < n; ++i) {
        sizes[i] = batch_views_[i].size();
        std::memcpy(bufs[i].data(), batch_views_[i].data(),
                    std::min(batch_views_[i].size(), bufs[i].size()));
    }
    return n;
}

} // namespace incxdp
