// SPDX-License-Identifier: BSD-2-Clause
// The mesh's graph, pure (no I/O): node ids, the link-state database, BFS
// routes with equal-cost first hops, and topology classification. The mesh
// daemon (mesh_daemon.cpp) feeds it what hellos and LSAs told it; the tests
// feed it graphs directly. docs/MESH.md §Discovery and routing.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace incxdp::mesh {

using NodeId = uint32_t;

// A mesh rule broken: a contradicting override, an unreachable node, a bad
// message. The message names the nodes or values involved.
struct MeshError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// FNV-1a 32 over the addresses (host order in, hashed as 4 bytes each in
// network order), sorted ascending and deduplicated first, so every node
// that learns the same set computes the same id (relay.h
// incxdp_mesh_node_id()).
NodeId node_id(std::vector<uint32_t> addrs);
// FNV-1a 32 over raw bytes (for the known test vectors).
uint32_t fnv1a32(const uint8_t *data, size_t len);

std::string id_str(NodeId id);           // "0x1a2b3c4d"
std::string ip_str(uint32_t addr);       // host order -> "10.0.0.1"
uint32_t parse_ip(const std::string &s); // "10.0.0.1" -> host order; throws MeshError

// True if sequence number a is newer than b (serial-number arithmetic,
// RFC 1982: a restarted counter that wraps still compares right).
bool seq_newer(uint32_t a, uint32_t b);

// One link of a node to a neighbour, addresses host order.
struct LinkInfo {
    NodeId node = 0;         // the neighbour
    uint32_t local_addr = 0; // the advertising node's address on the link
    uint32_t peer_addr = 0;  // the neighbour's
    bool operator==(const LinkInfo &) const = default;
};

// What a node says of itself.
struct Lsa {
    NodeId origin = 0;
    uint32_t seq = 0;
    std::vector<uint32_t> addrs; // host order
    std::vector<LinkInfo> links;
    bool operator==(const Lsa &) const = default;
};

// The link-state database: the newest LSA of every node, and when it came.
class Lsdb {
  public:
    struct Entry {
        Lsa lsa;
        uint64_t updated_ms = 0; // monotonic time of the last newer copy
    };
    enum class Offer { Newer, Same, Older };

    // Stores the LSA if it is newer than what is held (or nothing is held).
    // A copy with the same seq refreshes nothing: only the originator's
    // newer LSAs keep an entry alive.
    Offer offer(const Lsa &lsa, uint64_t now_ms);
    // Removes every entry older than max_age_ms, except `keep` (this node's
    // own). Returns the removed ids.
    std::vector<NodeId> age_out(uint64_t now_ms, uint64_t max_age_ms, NodeId keep);
    bool erase(NodeId id) { return entries_.erase(id) > 0; }
    const Entry *find(NodeId id) const;
    const std::map<NodeId, Entry> &entries() const { return entries_; }

  private:
    std::map<NodeId, Entry> entries_;
};

// An undirected graph of node ids.
struct Graph {
    std::map<NodeId, std::set<NodeId>> adj; // every node has an entry, maybe empty

    void add_node(NodeId n) { adj[n]; }
    void add_edge(NodeId a, NodeId b);
    size_t degree(NodeId n) const;
    bool connected() const;
};

// The graph the LSDB describes: every node holding an LSA, and a link only
// where both ends list each other (a one-way link, e.g. a hello heard in
// one direction or a neighbour that went away, carries nothing).
Graph graph_of(const Lsdb &db);

enum class TopoType { Full, Ring, Line, Partial };
enum class TopoOverride { Auto, Full, Ring, Line };

const char *topo_type_name(TopoType t);                 // "full", "ring", "line", "partial"
const char *topo_override_name(TopoOverride t);         // "auto", ...
TopoOverride parse_topo_override(const std::string &s); // throws MeshError

// By degrees: full if every degree is N-1; ring if N >= 3, every degree 2
// and connected; line if connected with two nodes of degree 1 and the rest
// 2; else partial. A full graph of three nodes is also a ring: full wins.
TopoType classify(const Graph &g);
// Whether the graph is a `t` (a 3-node full mesh is full and ring).
bool is_type(const Graph &g, TopoType t);
// The classification, checked against the override: auto takes the
// graph's; otherwise MeshError "topology override 'ring' contradicts the
// graph, which is 'line' (...)" unless the graph is one.
TopoType resolve_type(const Graph &g, TopoOverride o);

// How self reaches one destination.
struct Route {
    NodeId dst = 0;
    uint32_t hops = 0;              // links on every path below
    std::vector<NodeId> first_hops; // equal-cost neighbours, lowest id first
    // paths[i]: self, first_hops[i], ..., dst
    std::vector<std::vector<NodeId>> paths;
};

struct RouteTable {
    NodeId self = 0;
    uint32_t max_hops = 0;
    std::map<NodeId, Route> routes;     // reachable within max_hops
    std::map<NodeId, uint32_t> too_far; // reachable, but hops > max_hops
    std::vector<NodeId> disconnected;   // known, but no path at all

    // One line per problem, empty if every known node has a route.
    std::vector<std::string> errors() const;
    // Throws MeshError with errors() joined, if any.
    void require_complete() const;
};

// BFS from self over g. Per destination: the shortest hop count, up to
// max_nexthops distinct first hops on shortest paths (a ring's 2-hop peer
// has two: balance over both), and one full path per first hop (at every
// step the lowest-id node that is still on a shortest path). Destinations
// more than max_hops links away go to too_far; nodes without a path to
// disconnected.
RouteTable compute_routes(const Graph &g, NodeId self, uint32_t max_hops, size_t max_nexthops = 2);

} // namespace incxdp::mesh
