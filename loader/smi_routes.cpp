// SPDX-License-Identifier: BSD-2-Clause
// SMI routing tables from a cabling: Dijkstra towards each destination.
#include "smi_routes.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <queue>
#include <sstream>
#include <utility>

namespace incxdp::smi {
namespace {

constexpr int kInf = INT_MAX / 4;

int vertex(int rank, int ch) {
    return rank * kQsfps + ch;
}

// Cost from every (rank, QSFP) to the nearest QSFP of dst (the graph is
// undirected, so this is one Dijkstra from dst's QSFPs).
std::vector<int> distances_to(const Cabling &c, int dst) {
    std::vector<int> d(c.size() * kQsfps, kInf);
    using Item = std::pair<int, int>; // cost, vertex
    std::priority_queue<Item, std::vector<Item>, std::greater<>> q;
    for (int ch = 0; ch < kQsfps; ch++) {
        d[vertex(dst, ch)] = 0;
        q.push({0, vertex(dst, ch)});
    }
    while (!q.empty()) {
        auto [cost, v] = q.top();
        q.pop();
        if (cost > d[v])
            continue;
        int rank = v / kQsfps, ch = v % kQsfps;
        auto relax = [&](int w, int step) {
            if (cost + step < d[w]) {
                d[w] = cost + step;
                q.push({d[w], w});
            }
        };
        topo::smi::PortRef p = c.peer(rank, ch);
        if (p.rank >= 0)
            relax(vertex(p.rank, p.ch), kCableCost);
        for (int o = 0; o < kQsfps; o++)
            if (o != ch)
                relax(vertex(rank, o), kQsfpCost);
    }
    return d;
}

} // namespace

int port_qsfp(int port) {
    return port % kQsfps;
}

CkrEntry ckr_entry(int ch, int port) {
    int owner = port_qsfp(port);
    return owner == ch ? CkrEntry{CkrAction::Deliver, ch} : CkrEntry{CkrAction::Via, owner};
}

std::vector<incxdp_smi_cks_entry> cks_map_entries(const Routes &r, int rank) {
    std::vector<incxdp_smi_cks_entry> out(kQsfps * INCXDP_SMI_CKS_RANKS);
    const RankRoutes &rr = r.ranks.at(static_cast<size_t>(rank));
    const int n = std::min<int>(static_cast<int>(r.ranks.size()), INCXDP_SMI_CKS_RANKS);
    for (int ch = 0; ch < kQsfps; ch++)
        for (int dst = 0; dst < n; dst++) {
            const CksEntry &e = rr.cks[ch][dst];
            incxdp_smi_cks_entry &m = out[incxdp_smi_cks_key(ch, dst)];
            switch (e.action) {
            case CksAction::Local:
                m.action = INCXDP_SMI_CKS_LOCAL;
                break;
            case CksAction::Out:
                m.action = INCXDP_SMI_CKS_OUT;
                break;
            case CksAction::Via:
                m.action = INCXDP_SMI_CKS_VIA;
                break;
            case CksAction::Unreachable:
                m.action = INCXDP_SMI_CKS_UNREACHABLE;
                continue;
            }
            m.ch = static_cast<uint8_t>(e.ch);
            m.hops = static_cast<uint16_t>(std::max(rr.hops[dst], 0));
            m.cost = static_cast<uint32_t>(std::max(rr.cost[dst], 0));
        }
    return out;
}

std::vector<incxdp_smi_ckr_entry> ckr_map_entries() {
    std::vector<incxdp_smi_ckr_entry> out(kQsfps * INCXDP_SMI_PORTS * 2);
    for (int ch = 0; ch < kQsfps; ch++)
        for (int port = 0; port < INCXDP_SMI_PORTS; port++)
            for (unsigned kind : {INCXDP_SMI_CKR_DATA, INCXDP_SMI_CKR_CONTROL}) {
                const CkrEntry e = ckr_entry(ch, port);
                incxdp_smi_ckr_entry &m = out[incxdp_smi_ckr_key(ch, port, kind)];
                m.action =
                    e.action == CkrAction::Deliver ? INCXDP_SMI_CKR_DELIVER : INCXDP_SMI_CKR_VIA;
                m.ch = static_cast<uint8_t>(e.ch);
            }
    return out;
}

const char *cks_action_name(CksAction a) {
    switch (a) {
    case CksAction::Local:
        return "local";
    case CksAction::Out:
        return "out";
    case CksAction::Via:
        return "via";
    case CksAction::Unreachable:
        break;
    }
    return "unreachable";
}

Routes compute_routes(const Cabling &c) {
    const int n = c.size();
    Routes r;
    r.ranks.resize(n);
    for (RankRoutes &rr : r.ranks) {
        for (auto &t : rr.cks)
            t.resize(n);
        rr.out_ch.assign(n, -1);
        rr.hops.assign(n, -1);
        rr.cost.assign(n, -1);
    }
    for (int dst = 0; dst < n; dst++) {
        const std::vector<int> d = distances_to(c, dst);
        for (int rank = 0; rank < n; rank++) {
            RankRoutes &rr = r.ranks[rank];
            int best = -1;
            for (int ch = 0; ch < kQsfps; ch++) {
                CksEntry &e = rr.cks[ch][dst];
                const int here = d[vertex(rank, ch)];
                if (rank == dst) {
                    e = {CksAction::Local, ch};
                    continue;
                }
                if (here >= kInf)
                    continue; // Unreachable
                // Ties: the cable first, then the lowest QSFP.
                topo::smi::PortRef p = c.peer(rank, ch);
                if (p.rank >= 0 && kCableCost + d[vertex(p.rank, p.ch)] == here) {
                    e = {CksAction::Out, ch};
                    if (best < 0 || here < d[vertex(rank, best)])
                        best = ch;
                    continue;
                }
                for (int o = 0; o < kQsfps; o++)
                    if (o != ch && kQsfpCost + d[vertex(rank, o)] == here) {
                        e = {CksAction::Via, o};
                        break;
                    }
            }
            if (rank == dst) {
                rr.hops[dst] = 0;
                rr.cost[dst] = 0;
            } else if (best >= 0) {
                rr.out_ch[dst] = best;
                rr.cost[dst] = d[vertex(rank, best)];
            }
        }
    }
    for (int src = 0; src < n; src++)
        for (int dst = 0; dst < n; dst++)
            if (src != dst && r.ranks[src].out_ch[dst] >= 0)
                r.ranks[src].hops[dst] = static_cast<int>(rank_path(c, r, src, dst).size()) - 1;
    return r;
}

std::vector<int> rank_path(const Cabling &c, const Routes &r, int src, int dst) {
    std::vector<int> path{src};
    int at = src;
    // Each hop lowers the cost by at least a cable minus the transfers, so
    // the walk ends; the bound only guards a corrupted table.
    while (at != dst && static_cast<int>(path.size()) <= c.size()) {
        int ch = r.ranks[at].out_ch[dst];
        if (ch < 0)
            return {};
        at = c.peer(at, ch).rank;
        path.push_back(at);
    }
    return at == dst ? path : std::vector<int>{};
}

nlohmann::json routes_json(const Cabling &c, const Routes &r, int rank) {
    nlohmann::json out = nlohmann::json::array();
    for (int s = 0; s < c.size(); s++) {
        if (rank >= 0 && s != rank)
            continue;
        const RankRoutes &rr = r.ranks[s];
        nlohmann::json j;
        j["rank"] = s;
        j["fpga"] = c.fpgas[s];
        j["host"] = topo::smi::host_name(c.fpgas[s]);
        nlohmann::json relay = nlohmann::json::array();
        for (int d = 0; d < c.size(); d++)
            relay.push_back(
                {{"dst", d},
                 {"out", rr.out_ch[d] < 0 ? nlohmann::json() : nlohmann::json(rr.out_ch[d])},
                 {"hops", rr.hops[d]},
                 {"cost", rr.cost[d]},
                 {"path", rank_path(c, r, s, d)}});
        j["relay"] = relay;
        nlohmann::json qsfps = nlohmann::json::array();
        for (int ch = 0; ch < kQsfps; ch++) {
            nlohmann::json q;
            q["qsfp"] = ch;
            topo::smi::PortRef p = c.peer(s, ch);
            q["peer"] =
                p.rank < 0 ? nlohmann::json() : nlohmann::json({{"rank", p.rank}, {"qsfp", p.ch}});
            nlohmann::json cks = nlohmann::json::array();
            for (int d = 0; d < c.size(); d++) {
                const CksEntry &e = rr.cks[ch][d];
                cks.push_back({{"dst", d}, {"action", cks_action_name(e.action)}, {"qsfp", e.ch}});
            }
            q["ck_s"] = cks;
            nlohmann::json ckr = nlohmann::json::array();
            for (int port = 0; port < kPorts; port++) {
                CkrEntry e = ckr_entry(ch, port);
                const char *a = e.action == CkrAction::Deliver ? "deliver" : "via";
                ckr.push_back({{"port", port},
                               {"data", {{"action", a}, {"qsfp", e.ch}}},
                               {"control", {{"action", a}, {"qsfp", e.ch}}}});
            }
            q["ck_r"] = ckr;
            qsfps.push_back(q);
        }
        j["qsfps"] = qsfps;
        out.push_back(j);
    }
    return out;
}

std::string routes_text(const Cabling &c, const Routes &r, int rank) {
    std::ostringstream o;
    for (int s = 0; s < c.size(); s++) {
        if (rank >= 0 && s != rank)
            continue;
        const RankRoutes &rr = r.ranks[s];
        o << fmt::format("rank {} {} (namespace host {})\n", s, c.fpgas[s],
                         topo::smi::host_name(c.fpgas[s]));
        o << fmt::format("  {:>4}  {:>4}  {:>4}  {:<16}", "dst", "out", "hops", "path");
        for (int ch = 0; ch < kQsfps; ch++)
            o << fmt::format("  {:<8}", fmt::format("CK_S ch{}", ch));
        o << "\n";
        for (int d = 0; d < c.size(); d++) {
            std::string path;
            for (int x : rank_path(c, r, s, d))
                path += (path.empty() ? "" : ">") + std::to_string(x);
            o << fmt::format("  {:>4}  {:>4}  {:>4}  {:<16}", d,
                             rr.out_ch[d] < 0 ? "-" : fmt::format("ch{}", rr.out_ch[d]), rr.hops[d],
                             path.empty() ? "-" : path);
            for (int ch = 0; ch < kQsfps; ch++) {
                const CksEntry &e = rr.cks[ch][d];
                std::string cell = e.action == CksAction::Via ? fmt::format("via ch{}", e.ch)
                                                              : cks_action_name(e.action);
                o << fmt::format("  {:<8}", cell);
            }
            o << "\n";
        }
        o << "  CK_R (data and control alike): port p is delivered by QSFP p % 4's CK;";
        o << " the other CKs hand it there\n";
    }
    return o.str();
}

} // namespace incxdp::smi
