// SPDX-License-Identifier: BSD-2-Clause
#include "mesh_graph.h"

#include <incxdp/relay.h>
#include <incxdp/util/ipv4.h>

#include <fmt/format.h>

#include <algorithm>
#include <deque>

namespace incxdp::mesh {

uint32_t fnv1a32(const uint8_t *data, size_t len) {
    uint32_t h = INCXDP_FNV1A_BASIS;
    for (size_t i = 0; i < len; i++) {
        h ^= data[i];
        h *= INCXDP_FNV1A_PRIME;
    }
    return h;
}

NodeId node_id(std::vector<uint32_t> addrs) {
    std::sort(addrs.begin(), addrs.end());
    addrs.erase(std::unique(addrs.begin(), addrs.end()), addrs.end());
    return incxdp_mesh_node_id(addrs.data(), static_cast<unsigned>(addrs.size()));
}

std::string id_str(NodeId id) {
    return fmt::format("{:#010x}", id);
}

std::string ip_str(uint32_t addr) {
    return util::format_ipv4(addr);
}

uint32_t parse_ip(const std::string &s) {
    if (const auto ip = util::parse_ipv4(s))
        return *ip;
    throw MeshError(fmt::format("'{}' is not an IPv4 address", s));
}

bool seq_newer(uint32_t a, uint32_t b) {
    return static_cast<int32_t>(a - b) > 0;
}

// ---- LSDB -------------------------------------------------------------------

Lsdb::Offer Lsdb::offer(const Lsa &lsa, uint64_t now_ms) {
    auto it = entries_.find(lsa.origin);
    if (it != entries_.end()) {
        if (lsa.seq == it->second.lsa.seq)
            return Offer::Same;
        if (!seq_newer(lsa.seq, it->second.lsa.seq))
            return Offer::Older;
    }
    entries_[lsa.origin] = Entry{lsa, now_ms};
    return Offer::Newer;
}

std::vector<NodeId> Lsdb::age_out(uint64_t now_ms, uint64_t max_age_ms, NodeId keep) {
    std::vector<NodeId> gone;
    for (auto it = entries_.begin(); it != entries_.end();) {
        if (it->first != keep && now_ms > it->second.updated_ms + max_age_ms) {
            gone.push_back(it->first);
            it = entries_.erase(it);
        } else {
            ++it;
        }
    }
    return gone;
}

const Lsdb::Entry *Lsdb::find(NodeId id) const {
    auto it = entries_.find(id);
    return it == entries_.end() ? nullptr : &it->second;
}

// ---- graph ------------------------------------------------------------------

void Graph::add_edge(NodeId a, NodeId b) {
    if (a == b)
        return;
    adj[a].insert(b);
    adj[b].insert(a);
}

size_t Graph::degree(NodeId n) const {
    auto it = adj.find(n);
    return it == adj.end() ? 0 : it->second.size();
}

static std::map<NodeId, uint32_t> bfs_dist(const Graph &g, NodeId from) {
    std::map<NodeId, uint32_t> dist;
    if (!g.adj.count(from))
        return dist;
    std::deque<NodeId> q{from};
    dist[from] = 0;
    while (!q.empty()) {
        NodeId u = q.front();
        q.pop_front();
        for (NodeId v : g.adj.at(u))
            if (dist.emplace(v, dist[u] + 1).second)
                q.push_back(v);
    }
    return dist;
}

bool Graph::connected() const {
    return adj.empty() || bfs_dist(*this, adj.begin()->first).size() == adj.size();
}

Graph graph_of(const Lsdb &db) {
    Graph g;
    const auto &e = db.entries();
    for (const auto &[id, entry] : e) {
        g.add_node(id);
        for (const LinkInfo &l : entry.lsa.links) {
            auto peer = e.find(l.node);
            if (peer == e.end())
                continue;
            const auto &pl = peer->second.lsa.links;
            if (std::any_of(pl.begin(), pl.end(), [&](const LinkInfo &x) { return x.node == id; }))
                g.add_edge(id, l.node);
        }
    }
    return g;
}

// ---- classification ---------------------------------------------------------

const char *topo_type_name(TopoType t) {
    switch (t) {
    case TopoType::Full:
        return "full";
    case TopoType::Ring:
        return "ring";
    case TopoType::Line:
        return "line";
    case TopoType::Partial:
        return "partial";
    }
    return "?";
}

const char *topo_override_name(TopoOverride t) {
    switch (t) {
    case TopoOverride::Auto:
        return "auto";
    case TopoOverride::Full:
        return "full";
    case TopoOverride::Ring:
        return "ring";
    case TopoOverride::Line:
        return "line";
    }
    return "?";
}

TopoOverride parse_topo_override(const std::string &s) {
    if (s == "auto")
        return TopoOverride::Auto;
    if (s == "full")
        return TopoOverride::Full;
    if (s == "ring")
        return TopoOverride::Ring;
    if (s == "line")
        return TopoOverride::Line;
    throw MeshError(fmt::format("topology '{}' is not one of auto, ring, line, full", s));
}

bool is_type(const Graph &g, TopoType t) {
    const size_t n = g.adj.size();
    size_t deg1 = 0, deg2 = 0, full = 0;
    for (const auto &[id, nb] : g.adj) {
        deg1 += nb.size() == 1;
        deg2 += nb.size() == 2;
        full += nb.size() == n - 1;
    }
    switch (t) {
    case TopoType::Full:
        return n > 0 && full == n;
    case TopoType::Ring:
        return n >= 3 && deg2 == n && g.connected();
    case TopoType::Line:
        return n >= 2 && deg1 == 2 && deg2 == n - 2 && g.connected();
    case TopoType::Partial:
        return true;
    }
    return false;
}

TopoType classify(const Graph &g) {
    for (TopoType t : {TopoType::Full, TopoType::Ring, TopoType::Line})
        if (is_type(g, t))
            return t;
    return TopoType::Partial;
}

static std::string degrees_str(const Graph &g) {
    std::string s;
    for (const auto &[id, nb] : g.adj)
        s += fmt::format("{}{}:{}", s.empty() ? "" : " ", id_str(id), nb.size());
    return s;
}

TopoType resolve_type(const Graph &g, TopoOverride o) {
    const TopoType found = classify(g);
    if (o == TopoOverride::Auto)
        return found;
    const TopoType want = o == TopoOverride::Full   ? TopoType::Full
                          : o == TopoOverride::Ring ? TopoType::Ring
                                                    : TopoType::Line;
    if (!is_type(g, want))
        throw MeshError(fmt::format(
            "topology override '{}' contradicts the graph, which is '{}' ({} nodes, degrees {})",
            topo_type_name(want), topo_type_name(found), g.adj.size(), degrees_str(g)));
    return want;
}

// ---- routes -----------------------------------------------------------------

RouteTable compute_routes(const Graph &g, NodeId self, uint32_t max_hops, size_t max_nexthops) {
    RouteTable rt;
    rt.self = self;
    rt.max_hops = max_hops;
    const auto from_self = bfs_dist(g, self);
    for (const auto &[dst, nb] : g.adj) {
        if (dst == self)
            continue;
        auto d = from_self.find(dst);
        if (d == from_self.end()) {
            rt.disconnected.push_back(dst);
            continue;
        }
        if (d->second > max_hops) {
            rt.too_far[dst] = d->second;
            continue;
        }
        // Distances to dst: a neighbour one closer than self starts a
        // shortest path, and walking down them gives the rest of it.
        const auto to_dst = bfs_dist(g, dst);
        Route r;
        r.dst = dst;
        r.hops = d->second;
        for (NodeId n : g.adj.at(self)) {
            if (r.first_hops.size() >= max_nexthops)
                break;
            if (to_dst.at(n) + 1 == r.hops)
                r.first_hops.push_back(n);
        }
        for (NodeId first : r.first_hops) {
            std::vector<NodeId> path{self, first};
            NodeId cur = first;
            while (cur != dst) {
                for (NodeId n : g.adj.at(cur))
                    if (to_dst.at(n) + 1 == to_dst.at(cur)) {
                        cur = n;
                        break;
                    }
                path.push_back(cur);
            }
            r.paths.push_back(std::move(path));
        }
        rt.routes[dst] = std::move(r);
    }
    return rt;
}

std::vector<std::string> RouteTable::errors() const {
    std::vector<std::string> out;
    if (!disconnected.empty()) {
        std::string ids;
        for (NodeId n : disconnected)
            ids += (ids.empty() ? "" : ", ") + id_str(n);
        out.push_back(
            fmt::format("the mesh is disconnected: no path from {} to {}", id_str(self), ids));
    }
    for (const auto &[n, hops] : too_far)
        out.push_back(fmt::format("{} is unreachable from {}: {} hops, more than max_hops {}",
                                  id_str(n), id_str(self), hops, max_hops));
    return out;
}

void RouteTable::require_complete() const {
    std::string msg;
    for (const auto &e : errors())
        msg += (msg.empty() ? "" : "; ") + e;
    if (!msg.empty())
        throw MeshError(msg);
}

} // namespace incxdp::mesh
