// SPDX-License-Identifier: BSD-2-Clause
// The UDP transport: one non-blocking socket, sendmmsg/recvmmsg batches,
// UDP GSO on send and UDP GRO on receive (docs/PERF.md).
#include <incxdp/transport.h>
#include <incxdp/util/fd.h>
#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>
#include <vector>

#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

namespace incxdp {
namespace {

// One GSO send: at most this many segments (the kernel's UDP_MAX_SEGMENTS
// is 64 or more) and an IPv4 datagram's worth of payload.
constexpr size_t kMaxGsoSegments = 64;
constexpr size_t kMaxGsoBytes = 65535 - 20 - 8;
// A GRO receive is at most one such datagram.
constexpr size_t kGroBuffer = 65536;

using util::Fd;

sockaddr_in make_addr(const std::string &ip, uint16_t port, const char *what) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = util::ipv4_be_or_throw(ip, fmt::format("udp transport: {}", what));
    return a;
}

std::string to_string(const sockaddr_in &a) {
    return fmt::format("{}:{}", util::format_ipv4_be(a.sin_addr.s_addr), ntohs(a.sin_port));
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
        scmsg_.resize(batch);
        spkts_.resize(batch);
        rmsg_.resize(batch);
        riov_.resize(batch);
        gso_ = cfg.gso;
        int one = 1;
        if (cfg.gro && setsockopt(fd_.get(), SOL_UDP, UDP_GRO, &one, sizeof(one)) == 0) {
            gro_ = true;
            rcmsg_.resize(batch);
            gro_mem_.resize(batch * kGroBuffer);
            views_.reserve(batch * 4);
        }
    }

    size_t send_batch(std::span<const std::span<const std::byte>> pkts) override {
        size_t n = std::min(pkts.size(), siov_.size());
        // Messages: runs of equal-size datagrams (the last may be shorter)
        // become one GSO send each; without GSO every datagram is one message.
        size_t nmsg = 0;
        for (size_t i = 0; i < n;) {
            size_t seg = pkts[i].size(), start = i, total = seg;
            for (++i; gso_ && i < n && i - start < kMaxGsoSegments && pkts[i - 1].size() == seg &&
                      pkts[i].size() <= seg && total + pkts[i].size() <= kMaxGsoBytes;
                 ++i)
                total += pkts[i].size();
            for (size_t k = start; k < i; ++k) {
                siov_[k].iov_base = const_cast<std::byte *>(pkts[k].data());
                siov_[k].iov_len = pkts[k].size();
            }
            msghdr &h = smsg_[nmsg].msg_hdr;
            h = msghdr{};
            h.msg_name = &remote_;
            h.msg_namelen = sizeof(remote_);
            h.msg_iov = &siov_[start];
            h.msg_iovlen = i - start;
            if (i - start > 1) {
                Cmsg &c = scmsg_[nmsg];
                std::memset(&c, 0, sizeof(c));
                h.msg_control = c.buf;
                h.msg_controllen = CMSG_SPACE(sizeof(uint16_t));
                cmsghdr *cm = CMSG_FIRSTHDR(&h);
                cm->cmsg_level = SOL_UDP;
                cm->cmsg_type = UDP_SEGMENT;
                cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                uint16_t gso_size = uint16_t(seg);
                std::memcpy(CMSG_DATA(cm), &gso_size, sizeof(gso_size));
            }
            spkts_[nmsg++] = i - start;
        }
        for (;;) {
            int r = ::sendmmsg(fd_.get(), smsg_.data(), unsigned(nmsg), 0);
            if (r >= 0) {
                size_t sent = 0;
                for (int m = 0; m < r; ++m)
                    sent += spkts_[size_t(m)];
                return sent;
            }
            if (errno == EINTR)
                continue;
            // Full socket or device queue: the caller retries after wait().
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)
                return 0;
            // A kernel or route without UDP GSO: EIO/EINVAL/ENOPROTOOPT on
            // the first GSO message. Go on without it.
            if (gso_ && (errno == EIO || errno == EINVAL || errno == ENOPROTOOPT)) {
                gso_ = false;
                return send_batch(pkts);
            }
            throw std::system_error(errno, std::generic_category(),
                                    fmt::format("{}: sendmmsg", describe_));
        }
    }

    size_t recv_batch(std::span<const std::span<std::byte>> bufs,
                      std::span<size_t> sizes) override {
        if (gro_) { // split coalesced datagrams, then copy
            size_t n = std::min(bufs.size(), sizes.size());
            tmp_views_.resize(n);
            n = recv_views(std::span(tmp_views_).first(n), kGroBuffer);
            for (size_t i = 0; i < n; ++i) {
                sizes[i] = tmp_views_[i].size();
                std::memcpy(bufs[i].data(), tmp_views_[i].data(),
                            std::min(tmp_views_[i].size(), bufs[i].size()));
            }
            return n;
        }
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

    size_t recv_views(std::span<std::span<const std::byte>> out, size_t max_len) override {
        if (!gro_)
            return Transport::recv_views(out, max_len);
        // Segments of the last recvmmsg not handed out yet come first.
        if (view_head_ == views_.size()) {
            views_.clear();
            view_head_ = 0;
            if (!receive_gro())
                return 0;
        }
        size_t n = std::min(out.size(), views_.size() - view_head_);
        for (size_t i = 0; i < n; ++i)
            out[i] = views_[view_head_ + i];
        view_head_ += n;
        return n;
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
    // One recvmmsg into 64 KiB buffers; each message is cut into its GRO
    // segments (cmsg UDP_GRO = segment size; none: a single datagram).
    bool receive_gro() {
        size_t n = rmsg_.size();
        for (size_t i = 0; i < n; ++i) {
            riov_[i].iov_base = gro_mem_.data() + i * kGroBuffer;
            riov_[i].iov_len = kGroBuffer;
            msghdr &h = rmsg_[i].msg_hdr;
            h = msghdr{};
            h.msg_iov = &riov_[i];
            h.msg_iovlen = 1;
            h.msg_control = rcmsg_[i].buf;
            h.msg_controllen = sizeof(rcmsg_[i].buf);
        }
        int r;
        for (;;) {
            r = ::recvmmsg(fd_.get(), rmsg_.data(), unsigned(n), MSG_DONTWAIT, nullptr);
            if (r >= 0)
                break;
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNREFUSED)
                return false;
            throw std::system_error(errno, std::generic_category(),
                                    fmt::format("{}: recvmmsg", describe_));
        }
        for (size_t i = 0; i < size_t(r); ++i) {
            msghdr &h = rmsg_[i].msg_hdr;
            const std::byte *p = gro_mem_.data() + i * kGroBuffer;
            size_t len = rmsg_[i].msg_len, seg = len;
            for (cmsghdr *cm = CMSG_FIRSTHDR(&h); cm; cm = CMSG_NXTHDR(&h, cm))
                if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
                    int v = 0;
                    std::memcpy(&v, CMSG_DATA(cm), sizeof(v));
                    if (v > 0)
                        seg = size_t(v);
                }
            if (h.msg_flags & MSG_TRUNC) { // cannot be split reliably: one oversize datagram
                views_.emplace_back(p, kGroBuffer);
                continue;
            }
            for (size_t off = 0; off < len; off += seg)
                views_.emplace_back(p + off, std::min(seg, len - off));
        }
        return !views_.empty();
    }

    struct Cmsg {
        alignas(cmsghdr) char buf[CMSG_SPACE(sizeof(int))];
    };

    Fd fd_;
    sockaddr_in remote_;
    std::string describe_;
    std::vector<mmsghdr> smsg_, rmsg_;
    std::vector<iovec> siov_, riov_;
    std::vector<Cmsg> scmsg_, rcmsg_;
    std::vector<size_t> spkts_; ///< datagrams in each message of the last sendmmsg
    bool gso_ = false, gro_ = false;
    std::vector<std::byte> gro_mem_;
    std::vector<std::span<const std::byte>> views_, tmp_views_;
    size_t view_head_ = 0;
};

} // namespace

std::unique_ptr<Transport> make_udp_transport(const UdpTransportConfig &cfg) {
    return std::make_unique<UdpTransport>(cfg);
}

} // namespace incxdp
