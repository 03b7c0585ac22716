// SPDX-License-Identifier: BSD-2-Clause
// Point-to-point messaging and ring collectives between the nodes of a mesh
// cluster (docs/MESH.md §Point-to-point and collectives): hosts cabled
// directly, frames for non-neighbours relayed in XDP along the routes that
// `incxdp mesh run` installs. The API has the semantics of NCCL's net plugin
// (ext-net): non-blocking listen/connect/accept, isend/irecv/test matched in
// posting order, the real received size, reliable delivery over lossy paths.
#pragma once

#include <incxdp/reduce_op.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace incxdp::mesh {

/// What went wrong, as NCCL classifies it: System = the network (no route,
/// no progress, peer reset), Internal = misuse of a comm or request,
/// InvalidUsage = configuration (bad handle, listen id in use, truncation).
enum class ErrorKind { System, Internal, InvalidUsage };

struct Error : std::runtime_error {
    ErrorKind kind;
    Error(ErrorKind k, const std::string &what) : std::runtime_error(what), kind(k) {}
};

struct Options {
    std::string
        pin_dir; ///< the daemon's pins; empty = $INCXDP_MESH_PIN_DIR or /sys/fs/bpf/incxdp/mesh
    double timeout_s = 5;  ///< no progress on a connection or handshake this long: Error(System)
    double rto_s = 0.02;   ///< first retransmission timeout; doubles per timeout, up to 16x
    uint32_t window = 512; ///< segments in flight per connection and direction
    uint32_t max_requests = 64; ///< sends, and receives, not done per comm; beyond: nullptr
    double linger_s = 1;    ///< destructor: how long closed connections wait for the peer's CLOSE
    size_t max_segment = 0; ///< payload per segment; 0 = the first hop's MTU minus headers
    /// INCXDP_MESH_PIN_DIR, INCXDP_MESH_P2P_TIMEOUT (s), INCXDP_MESH_P2P_WINDOW.
    static Options from_env();
};

/// The listener's 128-byte handle (struct incxdp_p2p_handle).
using Handle = std::array<uint8_t, 128>;
constexpr int kMaxRecvs = 8; ///< buffers in one grouped irecv

struct Listen;
struct Comm;
struct Request;
class Link;

struct CommStats {
    uint32_t peer_node = 0;
    uint64_t bytes_sent = 0, bytes_received = 0;
    uint64_t segments_sent = 0, retransmissions = 0, timeouts = 0;
    uint8_t path = 0;      ///< the next hop index this side sends on
    std::string path_desc; ///< "2 hops via m-b (10.90.0.2)"
};

/// A node's endpoint: one per node (it owns the node's UDP port). Not
/// thread-safe: one thread drives it. Every call makes progress (sends,
/// receives, acks, retransmits); nothing runs in the background.
class Endpoint {
  public:
    /// The real network: AF_XDP sockets on the relay's interfaces (the UDP
    /// socket where they cannot bind, or with INCXDP_MESH_AF_XDP=0) and the
    /// routes in `o.pin_dir`.
    explicit Endpoint(const Options &o = Options::from_env());
    /// Any link (tests use an in-memory one).
    Endpoint(std::unique_ptr<Link> link, const Options &o);
    ~Endpoint();
    Endpoint(const Endpoint &) = delete;
    Endpoint &operator=(const Endpoint &) = delete;

    uint32_t node_id() const;

    /// Starts listening; `listen_id` 0 picks a free one. Never blocks.
    Listen *listen(uint32_t listen_id = 0);
    Handle handle(const Listen *l) const;
    /// nullptr = not yet: call again with the same handle (it keeps the
    /// pending connection in its local part). Throws Error after timeout_s.
    Comm *connect(Handle &h);
    /// nullptr = nobody connected yet. Never blocks.
    Comm *accept(Listen *l);

    /// nullptr = too many requests in flight, try later. `data` must stay
    /// valid until test() reports done (sends are zero-copy).
    Request *isend(Comm *c, const void *data, size_t size, int tag);
    /// Receives the next `n` messages of the comm, each into the buffer
    /// whose tag it carries. nullptr = try later.
    Request *irecv(Comm *c, int n, void *const *data, const size_t *sizes, const int *tags);
    /// true = done, and the request is freed; `sizes` (n entries for a
    /// receive, 1 for a send) get the real sizes. Throws Error if the
    /// connection failed.
    bool test(Request *r, size_t *sizes = nullptr);

    void close(Comm *c);
    void close(Listen *l);

    /// Sends, receives, acks, retransmits what is due.
    void progress();
    /// progress(), then sleeps in poll() up to max_ms if nothing is due.
    void wait(int max_ms);

    /// Throws Error(System) if `node` cannot be reached from here now: no
    /// route, or more than one hop away while this node's relay is off.
    /// `*desc` (if given) gets the route, e.g. "2 hops via m-n1 (10.91.0.2)".
    void check_reachable(uint32_t node, std::string *desc = nullptr);
    uint32_t peer_node(const Comm *c) const;
    CommStats stats(const Comm *c) const;
    /// Connections not yet gone, closing ones included (they wait for the
    /// peer's CLOSE).
    size_t open_comms() const;

    /// The handle of listener `listen_id` on the node with these addresses:
    /// what a peer derives from a topology file without any exchange.
    static Handle make_handle(std::span<const uint32_t> addrs_host_order, uint32_t listen_id);
    static uint32_t handle_node(const Handle &h);

    struct Impl;

  private:
    std::unique_ptr<Impl> impl_;
};

/// Ring order over a graph given by adjacency lists: a Hamiltonian cycle
/// of neighbours if there is one (ring4, ring8, full3), else 0..n-1 (the
/// ring then runs through relays). `*neighbours_only` tells which.
std::vector<size_t> ring_order(const std::vector<std::vector<size_t>> &adjacency,
                               bool *neighbours_only = nullptr);

/// Ring collectives between the members of a ring (one Endpoint per node).
/// Bidirectional: the buffer is split in two halves that travel opposite
/// ways, so both directions of every link carry data.
class Ring {
  public:
    /// `members` = every member's handle of listener `listen_id`, by rank;
    /// `order` = ring positions -> ranks. Connects to both ring neighbours
    /// (the lower position listens), throwing Error after timeout_s.
    Ring(Endpoint &ep, const std::vector<Handle> &members, const std::vector<size_t> &order,
         size_t rank, uint32_t listen_id, double timeout_s = 30);
    ~Ring();

    size_t size() const { return order_.size(); }
    /// In place, `count` elements.
    void allreduce(void *buf, size_t count, DType dtype, ReduceOp op);
    /// out = every rank's `bytes` in rank order.
    void allgather(const void *in, void *out, size_t bytes);
    /// out = this rank's `count` elements of the reduction of in (size()*count).
    void reduce_scatter(const void *in, void *out, size_t count, DType dtype, ReduceOp op);
    /// buf of rank `root` to every rank.
    void broadcast(void *buf, size_t bytes, size_t root);

    /// Bytes resent on this rank's two ring connections.
    uint64_t retransmissions() const;

  private:
    Endpoint &ep_;
    std::vector<size_t> order_;
    size_t pos_ = 0;
    Comm *left_ = nullptr, *right_ = nullptr;
    Listen *listen_ = nullptr;
};

} // namespace incxdp::mesh
