// SPDX-License-Identifier: BSD-2-Clause
// The datagram pipe between a worker and the switch. The Communicator only
// sees this interface, so the UDP socket and the AF_XDP socket are
// interchangeable (CommConfig::transport).
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace incxdp {

/// A whole Ethernet frame, every header built by the caller, and the
/// interface it leaves by: what a transport that addresses several peers
/// sends (make_afxdp_peers_transport).
struct FrameOut {
    std::span<const std::byte> frame;
    uint32_t ifindex = 0;
};

/// A bidirectional datagram channel to one switch (or, made by
/// make_afxdp_peers_transport, whole frames to several peers). Not thread-safe.
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

    /// Receive up to out.size() datagrams without blocking and without
    /// copying them: out[i] views memory the transport owns and stays valid
    /// until the next recv_views(), recv_batch() or wait() call. A datagram longer
    /// than max_len may be cut to max_len + 1 bytes (still recognisably too
    /// long). The default runs recv_batch() into buffers kept here; the UDP
    /// (GRO) and AF_XDP transports hand out their own memory.
    virtual size_t recv_views(std::span<std::span<const std::byte>> out, size_t max_len);

    /// Block until a datagram is readable (or, with want_send, the send
    /// buffer has room) or `timeout` passed. Spurious returns are allowed.
    virtual void wait(std::chrono::nanoseconds timeout, bool want_send) = 0;

    /// "udp 10.77.0.1:4000 -> 10.77.0.254:48880", for error messages.
    virtual std::string describe() const = 0;

    /// Datagrams the kernel dropped since the transport was created because
    /// its receive queue had no room for them (AF_XDP: rx ring full or fill
    /// ring empty). They come back only by retransmission. The UDP transport
    /// does not count them (0).
    virtual uint64_t rx_dropped() const { return 0; }

    /// Whether the frames sent here reach the switch's XDP program with room
    /// to grow in place: AF_XDP live frames do (each an xdp_frame in a page
    /// of its own); frames the kernel builds as skbs (the AF_XDP tx ring, a
    /// socket, an RDMA device) arrive sized to their data, wherever veth or
    /// generic XDP copies them. A RoCE Broadcast's non-root ranks pad their
    /// SENDs where the frames cannot grow (docs/ROCE.md §6).
    virtual bool frames_grow_at_switch() const { return false; }

    /// Several peers: sends whole frames, each out of its own interface,
    /// without blocking; returns how many were taken, in order. Frames are
    /// at most max_frame() bytes. Transports to one peer throw
    /// std::logic_error.
    virtual size_t send_frames(std::span<const FrameOut> frames) {
        (void)frames;
        throw std::logic_error(describe() + ": sends to one peer only (send_batch)");
    }
    /// The longest frame send_frames() takes; 0 if it takes none.
    virtual size_t max_frame() const { return 0; }
    /// Every descriptor that polls readable when a receive would find
    /// frames (empty if the transport does not say).
    virtual std::vector<int> poll_fds() const { return {}; }

  protected:
    /// recv_batch() for transports whose own receive is recv_views(): copies
    /// the views out (sizes as recv_batch() reports them).
    size_t recv_batch_from_views(std::span<const std::span<std::byte>> bufs,
                                 std::span<size_t> sizes);

  private:
    std::vector<std::span<const std::byte>> batch_views_; // recv_batch_from_views()
    // recv_views() default: out.size() buffers of max_len + 1 bytes.
    std::vector<std::byte> view_mem_;
    std::vector<std::span<std::byte>> view_bufs_;
    std::vector<size_t> view_sizes_;
};

struct UdpTransportConfig {
    std::string local_ip;        ///< address to bind, e.g. the worker's topology IP
    uint16_t local_port = 0;     ///< 0 = kernel's choice
    std::string remote_ip;       ///< switch address
    uint16_t remote_port = 0;    ///< switch UDP port
    int socket_buffer = 8 << 20; ///< SO_RCVBUF/SO_SNDBUF bytes (FORCE variants when root)
    size_t batch = 32;           ///< max datagrams per sendmmsg/recvmmsg
    /// UDP_SEGMENT: runs of equal-size datagrams (the last may be shorter)
    /// leave in one sendmsg, segmented once below the socket layer. Turned off
    /// by itself if the kernel refuses it.
    bool gso = true;
    /// UDP_GRO: the kernel may hand over several datagrams of one flow as one
    /// (they are split again here). Takes effect only where the receiving
    /// interface has GRO on (`ethtool -K IF gro on`); on the star topology
    /// it coalesced nothing even then (docs/PERF.md), hence off by default.
    bool gro = false;
};

/// Non-blocking UDP socket bound to local_ip:local_port, sending with
/// sendmmsg to remote_ip:remote_port and receiving from any source with
/// recvmmsg. Throws std::system_error naming the address on failure.
std::unique_ptr<Transport> make_udp_transport(const UdpTransportConfig &cfg);

struct AfXdpTransportConfig {
    std::string local_ip;           ///< the worker's address; selects the interface
    uint16_t local_port = 0;        ///< the worker's UDP port (frames to it go to the socket)
    std::string remote_ip;          ///< switch address; its MAC comes from the neighbour table
    uint16_t remote_port = 0;       ///< switch UDP port
    std::string ifname;             ///< interface; empty = the one holding local_ip
    uint32_t queue = 0;             ///< rx queue the first socket binds to (and sends from)
    /// Bind a socket to every further rx queue that frames for local_port
    /// arrive on (incxdp_xsk counts them): a NIC's RSS or, on veth, the
    /// sending CPU picks the queue. Off: frames on other queues go to the
    /// stack, and the collective stalls on them.
    bool follow_queues = true;
    uint32_t frame_size = 4096;     ///< umem frame: one Ethernet frame each
    uint32_t rx_frames = 1024;      ///< umem frames for receiving (fill ring)
    uint32_t tx_frames = 1024;      ///< umem frames for sending
    size_t batch = 64;              ///< descriptors per ring operation
    size_t max_payload = 3500 - 28; ///< largest UDP payload that will be sent
    /// Send by running incxdp_xsk with BPF_PROG_RUN live frames (the
    /// frames reach the switch's XDP program without an skb, one redirect
    /// flush per batch) instead of through the AF_XDP tx ring (copy mode:
    /// one skb per frame, which veth copies again). docs/PERF.md.
    bool tx_live_frames = true;
    /// Whole Ethernet frames instead of UDP payloads: send_batch takes
    /// complete frames (sent as they are, up to 42 + max_payload bytes) and
    /// recv_views/recv_batch hand out the complete frames incxdp_xsk steered
    /// here (IPv4/UDP to local_ip:local_port). The caller builds every
    /// header, so the switch's MAC is not looked up (see resolve_link()).
    /// Used for RoCEv2 (local_port 4791).
    bool raw_frames = false;
};

/// The interface that holds `local_ip` (or `ifname`), its MAC and MTU, and
/// the MAC of `remote_ip` from this namespace's neighbour table on it.
struct LinkInfo {
    std::string ifname;
    std::array<uint8_t, 6> local_mac{}, remote_mac{};
    uint32_t mtu = 0;
};

/// Look up LinkInfo in the calling thread's network namespace. Throws
/// std::system_error naming what is missing (no interface holds local_ip,
/// no complete neighbour entry for remote_ip: topologies install permanent
/// ones), std::invalid_argument for a malformed address.
LinkInfo resolve_link(const std::string &local_ip, const std::string &remote_ip,
                      const std::string &ifname = "");

/// AF_XDP sockets (zero-copy where the driver has it, else copy; one umem
/// each) on the interface holding local_ip: on `queue`, and with
/// follow_queues on every further rx queue frames for local_port arrive on.
/// Sends through its tx ring or, by default, as live XDP frames (above).
/// While it exists, the interface runs incxdp_xsk: IPv4/UDP frames to
/// local_ip:local_port go to the socket, all else to the stack. The program
/// that was attached before (topologies attach incxdp_pass) is put back when
/// the transport is destroyed; if there was none, incxdp_xsk stays, passing
/// everything. Frames are built here: Ethernet (the switch's MAC from the
/// neighbour table), IPv4 (checksum), UDP (checksum 0). Needs root
/// (CAP_NET_ADMIN, CAP_BPF). Throws std::system_error naming the interface.
std::unique_ptr<Transport> make_afxdp_transport(const AfXdpTransportConfig &cfg);

/// AF_XDP towards several peers over interfaces whose XDP program is the
/// caller's (the mesh relay): it steers frames to the sockets and, for
/// sending, holds incxdp_tx_frames (bpf/lib/xsk_tx.h, incxdp/xsk.h).
struct AfXdpPeersConfig {
    std::vector<std::string> ifnames;
    /// The program's XSKMAP: the socket of (ifnames[i], rx queue q) goes
    /// under key i * queue_stride + q; queues from queue_stride on get none.
    int xskmap_fd = -1;
    uint32_t queue_stride = 1;
    uint32_t frame_size = 4096; ///< umem frame: one Ethernet frame each
    uint32_t rx_frames = 512;   ///< umem frames (fill ring) per socket
    size_t batch = 64;          ///< descriptors per ring operation, frames per send
    /// umem frames of a tx ring on each interface's rx queue 0 socket (after
    /// its rx frames); 0: none.
    uint32_t tx_frames = 256;
    /// Send live frames through the interfaces' program (BPF_PROG_RUN, as
    /// AfXdpTransportConfig::tx_live_frames), where every interface can
    /// transmit XDP frames and the program holds incxdp_tx_frames. With both
    /// ways, INCXDP_XSK_TX=ring|live|auto picks per send_frames() call
    /// (auto, the default: a few frames through the ring, a batch live).
    /// Neither: max_frame() is 0 and the caller sends some other way.
    bool tx_live_frames = true;
    std::string describe; ///< who, for messages
};

/// Receives whole frames (recv_views) from every socket, sends whole frames
/// (send_frames). Throws std::system_error naming the interface and queue.
std::unique_ptr<Transport> make_afxdp_peers_transport(const AfXdpPeersConfig &cfg);

} // namespace incxdp
