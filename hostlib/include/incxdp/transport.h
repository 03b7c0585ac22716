// SPDX-License-Identifier: BSD-2-Clause
// The datagram pipe between a worker and the switch. The Communicator only
// sees this interface so an AF_XDP transport can replace the UDP socket.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace incxdp {

/// A bidirectional datagram channel to one switch. Not thread-safe.
class Transport {
  public:
    virtual ~Transport() = default;

    /// Hand datagrams to the kernel without blocking; returns how many were
    /// taken (fewer than pkts.size() when the send buffer is full).
    /// Throws std::system_error on a hard error, naming the endpoints.
    virtual size_t send_batch(std::span<const std::span<const std::byte>> pkts) = 0;

    /// Receive up to bufs.size() datagrams without blocking. sizes[i] is the
    /// length of datagram i; a datagram longer than its buffer is reported
    /// with sizes[i] > bufs[i].size() (and truncated). Returns the count.
    virtual size_t recv_batch(std::span<const std::span<std::byte>> bufs,
                              std::span<size_t> sizes) = 0;

    /// Block until a datagram is readable (or, with want_send, the send
    /// buffer has room) or `timeout` passed. Spurious returns are allowed.
    virtual void wait(std::chrono::nanoseconds timeout, bool want_send) = 0;

    /// "udp 10.77.0.1:4000 -> 10.77.0.254:48880", for error messages.
    virtual std::string describe() const = 0;
};

struct UdpTransportConfig {
    std::string local_ip;        ///< address to bind, e.g. the worker's topology IP
    uint16_t local_port = 0;     ///< 0 = kernel's choice
    std::string remote_ip;       ///< switch address
    uint16_t remote_port = 0;    ///< switch UDP port
    int socket_buffer = 8 << 20; ///< SO_RCVBUF/SO_SNDBUF bytes (FORCE variants when root)
    size_t batch = 32;           ///< max datagrams per sendmmsg/recvmmsg
};

/// Non-blocking UDP socket bound to local_ip:local_port, sending with
/// sendmmsg to remote_ip:remote_port and receiving from any source with
/// recvmmsg. Throws std::system_error naming the address on failure.
std::unique_ptr<Transport> make_udp_transport(const UdpTransportConfig &cfg);

} // namespace incxdp
