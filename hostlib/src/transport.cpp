// SPDX-License-Identifier: BSD-2-Clause
// Transport::recv_views() for transports that only implement recv_batch().
#include <incxdp/transport.h>

#include <algorithm>

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

} // namespace incxdp
