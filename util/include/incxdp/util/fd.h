// SPDX-License-Identifier: BSD-2-Clause
// An owned file descriptor: sockets, pinned BPF maps, pipes, namespaces.
#pragma once

namespace incxdp::util {

/// Move-only; closes what it holds on destruction and on reset().
class Fd {
  public:
    Fd() = default;
    explicit Fd(int fd) noexcept : fd_(fd) {}
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    Fd(Fd &&o) noexcept : fd_(o.release()) {}
    Fd &operator=(Fd &&o) noexcept {
        if (this != &o)
            reset(o.release());
        return *this;
    }
    ~Fd() { reset(); }

    int get() const noexcept { return fd_; }
    explicit operator bool() const noexcept { return fd_ >= 0; }
    /// Gives up ownership: the caller closes the returned fd.
    int release() noexcept {
        const int fd = fd_;
        fd_ = -1;
        return fd;
    }
    /// Closes the fd held (if any) and takes `fd`.
    void reset(int fd = -1) noexcept;

  private:
    int fd_ = -1;
};

} // namespace incxdp::util
