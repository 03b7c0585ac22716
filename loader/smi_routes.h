// SPDX-License-Identifier: BSD-2-Clause
// SMI's routing (docs/SMI.md §Routing), pure: shortest paths over (FPGA,
// QSFP) vertices (a cable costs 100, moving between the QSFPs of one FPGA
// 1), SMI's CK_S and CK_R tables per (rank, QSFP), and the per-rank next
// hop the relay's forwarding table holds. Shared by `incxdp smi` and the
// SMI runtime (hostlib), which finds its first hops here.
#pragma once

#include "incxdp/smi_topology.h"

#include <incxdp/smi_maps.h>

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace incxdp::smi {

using topo::smi::Cabling;
using topo::smi::kQsfps;

inline constexpr int kCableCost = 100;
inline constexpr int kQsfpCost = 1;
inline constexpr int kPorts = 256;

// CK_S of (rank, QSFP), indexed by destination rank.
enum class CksAction : uint8_t {
    Local,       // this rank: to CK_R / the endpoint
    Out,         // out of this QSFP's cable
    Via,         // hand to QSFP ch's CK_S
    Unreachable, // no path
};
struct CksEntry {
    CksAction action = CksAction::Unreachable;
    int ch = -1; // Out: this QSFP; Via: the QSFP handed to
};

// CK_R of (rank, QSFP), indexed by (port, data|control), for messages to
// this rank (others go to CK_S). SMI assigns port p to QSFP p % 4's CK.
enum class CkrAction : uint8_t {
    Deliver, // this CK holds the port's endpoint
    Via,     // hand to QSFP ch's CK_R
};
struct CkrEntry {
    CkrAction action = CkrAction::Deliver;
    int ch = -1;
};
int port_qsfp(int port);
CkrEntry ckr_entry(int ch, int port); // the same for data and control

struct RankRoutes {
    std::array<std::vector<CksEntry>, kQsfps> cks; // [ch][dst]
    // The rank as one node (the relay's table): the QSFP a frame for dst
    // leaves by whichever QSFP it came in on (-1: local or unreachable),
    // cables to dst (-1: unreachable) and the path's cost.
    std::vector<int> out_ch, hops, cost;
};

struct Routes {
    std::vector<RankRoutes> ranks;
};

Routes compute_routes(const Cabling &c);

// Ranks along the relay's path from src to dst, both included; empty if
// unreachable.
std::vector<int> rank_path(const Cabling &c, const Routes &r, int src, int dst);

const char *cks_action_name(CksAction a); // "local", "out", "via", "unreachable"

// One rank's tables as the BPF maps hold them (incxdp/smi_maps.h), indexed
// by incxdp_smi_cks_key / incxdp_smi_ckr_key; every entry of the arrays
// (ranks past the cabling's: unreachable).
std::vector<incxdp_smi_cks_entry> cks_map_entries(const Routes &r, int rank);
std::vector<incxdp_smi_ckr_entry> ckr_map_entries();

// Both tables of one rank (or every rank when rank < 0), for `incxdp smi
// routes`: JSON, and aligned text.
nlohmann::json routes_json(const Cabling &c, const Routes &r, int rank = -1);
std::string routes_text(const Cabling &c, const Routes &r, int rank = -1);

} // namespace incxdp::smi
