// SPDX-License-Identifier: BSD-2-Clause
#include "incxdp/util/fd.h"

#include <unistd.h>

namespace incxdp::util {

void Fd::reset(int fd) noexcept {
    // close() releases the descriptor even when it fails (EINTR included on
    // Linux), so there is nothing to retry.
    if (fd_ >= 0 && fd_ != fd)
        ::close(fd_);
    fd_ = fd;
}

} // namespace incxdp::util
