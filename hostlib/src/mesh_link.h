// SPDX-License-Identifier: BSD-2-Clause
// A node's way onto the mesh: frames of some relay kind to any node id,
// sent to the first hop of the route the mesh daemon installed (the relay's
// pinned maps), and the frames for this node received. Used by the p2p
// endpoint (mesh.h) and the SMI runtime (smi_runtime.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace incxdp::mesh {

/// One frame to send: the relay header is built from the first four fields;
/// `head` and `body` follow it on the wire (either may be empty).
struct OutFrame {
    uint32_t dst_node = 0;
    uint8_t kind = 0;
    uint8_t path = 0; ///< which equal-cost next hop (the relay keeps it)
    uint32_t session = 0;
    const void *head = nullptr;
    size_t head_len = 0;
    const void *body = nullptr;
    size_t body_len = 0;
};

/// One frame received for this node; `data` (after the relay header) is
/// valid until the next recv().
struct InFrame {
    uint32_t src_node = 0;
    uint8_t kind = 0, hops = 0, path = 0;
    uint32_t session = 0;
    const uint8_t *data = nullptr;
    size_t len = 0;
};

/// The route to a node as the link sees it now.
struct PathInfo {
    bool found = false;
    uint32_t hops = 0;            ///< links to the destination
    uint32_t nnexthops = 0;       ///< equal-cost first hops
    uint32_t mtu = 0;             ///< of the first hop's interface
    std::string iface;            ///< the first hop's interface
    std::string via;              ///< the neighbour's address on that link
    std::string describe() const; ///< "3 hops via m-b (10.90.1.2)" or "no route"
};

class Link {
  public:
    virtual ~Link() = default;
    virtual uint32_t self_node() const = 0;
    /// This node's IPv4 addresses (host order, sorted): the listen handle's.
    virtual std::vector<uint32_t> addresses() const = 0;
    /// Whether this node relays for others (the daemon's --relay).
    virtual bool relay_enabled() const { return true; }
    /// Sends what it can now, in order; returns how many were taken (the
    /// rest: try later). A frame without a route is taken and dropped.
    virtual size_t send(std::span<const OutFrame> frames) = 0;
    /// Non-blocking: fills `out` with frames for this node, returns how many.
    virtual size_t recv(std::span<InFrame> out) = 0;
    /// The route to `dst` through next hop `path` (mod the route's count),
    /// from a cache refreshed every so often; `reread` reads the maps now.
    virtual PathInfo path(uint32_t dst, uint8_t path, bool reread = false) = 0;
    /// Largest `head_len + body_len` a frame to `dst` may carry.
    virtual size_t max_payload(uint32_t dst) = 0;
    /// A descriptor that polls readable when recv() has frames, or -1.
    virtual int poll_fd() const { return -1; }
    /// Every descriptor recv() reads (the AF_XDP sockets and the UDP one).
    virtual std::vector<int> poll_fds() const {
        int fd = poll_fd();
        return fd >= 0 ? std::vector<int>{fd} : std::vector<int>{};
    }
    /// How frames for this node arrive: "udp", "af_xdp copy", "af_xdp zero-copy".
    virtual std::string delivery() const { return "udp"; }
};

/// $INCXDP_MESH_PIN_DIR, else /sys/fs/bpf/incxdp/mesh.
std::string default_pin_dir();

/// The node's IPv4 addresses on interfaces that are up, loopback excepted
/// (host order, sorted), and incxdp_mesh_node_id() of them.
std::vector<uint32_t> local_addresses();
uint32_t node_id_of(std::vector<uint32_t> addrs_host_order);

/// The real link: one non-blocking UDP socket on INCXDP_RELAY_UDP_PORT and
/// the routes read from the daemon's pinned maps in `pin_dir` (bpf_obj_get);
/// this node is the one the daemon's incxdp_relay_cfg names. Throws
/// std::runtime_error naming the socket or the pin dir; binding the port
/// fails while another endpoint of this node holds it (one per node).
std::unique_ptr<Link> open_udp_link(const std::string &pin_dir);
/// The same for a relay whose nodes are not named by their addresses (SMI
/// names them by rank): this node is `self_node`, whatever the config says.
std::unique_ptr<Link> open_udp_link(const std::string &pin_dir, uint32_t self_node);
/// The same through AF_XDP (make_afxdp_peers_transport): frames for this
/// node arrive on one socket per (interface the relay runs on, rx queue),
/// put in the relay's incxdp_relay_if_xsks under the interface's slot
/// (incxdp/relay.h); frames leave built whole for the first hop through the
/// transport (its tx rings, or live frames through the relay program for
/// large batches), those too long for either through the UDP socket. Where AF_XDP cannot bind, prints one notice
/// line (naming `who`) and uses the UDP socket only: no relay program or
/// slot maps, an interface without XDP, a socket already bound on a queue,
/// or an MTU whose frames an AF_XDP frame cannot hold. INCXDP_MESH_XDP_TX=0
/// sends everything through the UDP socket.
std::unique_ptr<Link> open_xdp_link(const std::string &pin_dir, uint32_t self_node,
                                    const std::string &who);
/// The same for the mesh's own nodes: this node is the one the daemon's
/// incxdp_relay_cfg names, as open_udp_link(pin_dir).
std::unique_ptr<Link> open_xdp_link(const std::string &pin_dir, const std::string &who);

} // namespace incxdp::mesh
