// SPDX-License-Identifier: BSD-2-Clause
// The UDP transport: one non-blocking socket, sendmmsg/recvmmsg batches.
#include <incxdp/transport.h>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <vector>

namespace incxdp {
namespace {

class Fd {
  public:
    explicit Fd(int fd) : fd_(fd) {}
    ~Fd() {
        if (fd_ >= 0)
            ::close(fd_);
    }
    Fd(const Fd &) = delete;
    Fd &operator=(const Fd &) = delete;
    int get() const { return fd_; }

  private:
    int fd_;
};

sockaddr_in make_addr(const std::string &ip, uint16_t port, const char *what) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    if (inet_pton(AF_INET, ip.c_str(), &a.sin_addr) != 1)
        throw std::invalid_argument(
            fmt::format("udp transport: {} '{}' is not an IPv4 address", what, ip));
    return a;
}

std::string to_string(const sockaddr_in &a) {
    char buf[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &a.sin_addr, buf, sizeof(buf));
    return fmt::format("{}:{}", buf, ntohs(a.sin_port));
}

// Raise a socket buffer: the FORCE variant ignores net.core.{r,w}mem_max but
// needs CAP_NET_ADMIN; without it the plain option is capped by the sysctl.
void raise_buffer(int fd, int force_opt, int opt, int bytes) {
    if (bytes <= 0)
        return;
    if (setsockopt(fd, SOL_SOCKET, force_opt, &bytes, sizeof(bytes)) == 0)
        return;
    (void)setsockopt(fd, SOL_SOCKET, opt, &bytes, sizeof(bytes));
}

class UdpTransport final : public Transport {
  public:
    explicit UdpTransport(const UdpTransportConfig &cfg)
        : fd_(::socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)),
          remote_(make_addr(cfg.remote_ip, cfg.remote_port, "switch address")) {
        sockaddr_in local = make_addr(cfg.local_ip, cfg.local_port, "local address");
        if (fd_.get() < 0)
            throw std::system_error(errno, std::generic_category(),
                                    "udp transport: socket(AF_INET, SOCK_DGRAM)");
        raise_buffer(fd_.get(), SO_RCVBUFFORCE, SO_RCVBUF, cfg.socket_buffer);
        raise_buffer(fd_.get(), SO_SNDBUFFORCE, SO_SNDBUF, cfg.socket_buffer);
        if (::bind(fd_.get(), reinterpret_cast<sockaddr *>(&local), sizeof(local)) < 0) {
            int err = errno;
            throw std::system_error(
                err, std::generic_category(),
                fmt::format("udp transport: bind {}{}", to_string(local),
                            err == EADDRNOTAVAIL
                                ? " (address not on this host: run in the worker's netns?)"
                                : ""));
        }
        socklen_t len = sizeof(local);
        getsockname(fd_.get(), reinterpret_cast<sockaddr *>(&local), &len);
        describe_ = fmt::format("udp {} -> {}", to_string(local), to_string(remote_));

        size_t batch = cfg.batch ? cfg.batch : 1;
        smsg_.resize(batch);
        siov_.resize(batch);
        rmsg_.resize(batch);
        riov_.resize(batch);
    }

    size_t send_batch(std::span<const std::span<const std::byte>> pkts) override {
        size_t n = std::min(pkts.size(), smsg_.size());
        for (size_t i = 0; i < n; ++i) {
            siov_[i].iov_base = const_cast<std::byte *>(pkts[i].data());
            siov_[i].iov_len = pkts[i].size();
            msghdr &h = smsg_[i].msg_hdr;
            h = msghdr{};
            h.msg_name = &remote_;
            h.msg_namelen = sizeof(remote_);
            h.msg_iov = &siov_[i];
            h.msg_iovlen = 1;
        }
        for (;;) {
            int r = ::sendmmsg(fd_.get(), smsg_.data(), unsigned(n), 0);
            if (r >= 0)
                return size_t(r);
            if (errno == EINTR)
                continue;
            // Full socket or device queue: the caller retries after wait().
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
                return 0;
            throw std::system_error(errno, std::generic_category(),
                                    fmt::format("{}: sendmmsg", describe_));
        }
    }

    size_t recv_batch(std::span<const std::span<std::byte>> bufs,
                      std::span<size_t> sizes) override {
        size_t n = std::min<size_t>({bufs.size(), sizes.size(), rmsg_.size()});
        for (size_t i = 0; i < n; ++i) {
            riov_[i].iov_base = bufs[i].data();
            riov_[i].iov_len = bufs[i].size();
            msghdr &h = rmsg_[i].msg_hdr;
            h = msghdr{};
            h.msg_iov = &riov_[i];
            h.msg_iovlen = 1;
        }
        for (;;) {
            // MSG_TRUNC: msg_len is the datagram's real length even if cut.
            int r =
                ::recvmmsg(fd_.get(), rmsg_.data(), unsigned(n), MSG_DONTWAIT | MSG_TRUNC, nullptr);
            if (r >= 0) {
                for (int i = 0; i < r; ++i)
                    sizes[size_t(i)] = rmsg_[size_t(i)].msg_len;
                return size_t(r);
            }
            if (errno == EINTR)
                continue;
            // ECONNREFUSED: an ICMP error for an earlier send; not fatal here,
            // the retransmission timer keeps trying.
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNREFUSED)
                return 0;
            throw std::system_error(errno, std::generic_category(),
                                    fmt::format("{}: recvmmsg", describe_));
        }
    }

    void wait(std::chrono::nanoseconds timeout, bool want_send) override {
        pollfd p{fd_.get(), short(POLLIN | (want_send ? POLLOUT : 0)), 0};
        auto ns = std::max<int64_t>(timeout.count(), 0);
        timespec ts{time_t(ns / 1000000000), long(ns % 1000000000)};
        if (::ppoll(&p, 1, &ts, nullptr) < 0 && errno != EINTR)
            throw std::system_error(errno, std::generic_category(),
                                    fmt::format("{}: ppoll", describe_));
    }

    std::string describe() const override { return describe_; }

  private:
    Fd fd_;
    sockaddr_in remote_;
    std::string describe_;
    std::vector<mmsghdr> smsg_, rmsg_;
    std::vector<iovec> siov_, riov_;
};

} // namespace

std::unique_ptr<Transport> make_udp_transport(const UdpTransportConfig &cfg) {
    return std::make_unique<UdpTransport>(cfg);
}

} // namespace incxdp
