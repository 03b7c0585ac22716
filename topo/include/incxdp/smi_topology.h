// SPDX-License-Identifier: BSD-2-Clause
// SMI's cabling files (docs/SMI.md §Routing): the JSON format
//   {"fpgas": {"fpga-0001:acl0": "prog", ...},
//    "connections": {"fpga-0001:acl0:ch1": "fpga-0002:acl0:ch0", ...}}
// and the older text format, one cable per line
//   fpga-0014:acl0:ch0 - fpga-0014:acl1:ch0
// Ranks are the FPGAs sorted by `node:fpga` name. The cabling becomes a
// mesh Topology (one namespace per FPGA, interfaces ch0..ch3, a /30 per
// cable) so `incxdp topo up FILE` brings the cluster up.
#pragma once

#include "incxdp/topology.h"

#include <array>
#include <map>
#include <string>
#include <vector>

namespace incxdp::topo::smi {

// QSFP ports per FPGA (ch0..ch3).
inline constexpr int kQsfps = 4;
inline constexpr int kMaxRanks = 256;

struct PortRef {
    int rank = -1;
    int ch = -1;
};

struct Cable {
    PortRef a, b;
};

struct Cabling {
    std::string source;                            // file name, for messages
    std::vector<std::string> fpgas;                // "node:fpga", sorted; index = rank
    std::vector<std::string> programs;             // per rank; empty in the text format
    std::vector<Cable> cables;                     // file order (JSON: key order)
    std::vector<std::array<int, kQsfps>> cable_at; // [rank][ch]: cable index or -1

    int size() const { return static_cast<int>(fpgas.size()); }
    int rank_of(const std::string &fpga) const; // -1 if unknown
    // The other end of (rank, ch), or {-1,-1} if the port has no cable.
    PortRef peer(int rank, int ch) const;
};

// Parses either format (JSON if the first non-blank character is '{').
// Errors name the source and the line or key: a port used twice, a bad
// port name, an unknown FPGA, a cable from a port to itself, > 256 FPGAs.
Cabling parse_cabling(const std::string &text, const std::string &source);
Cabling load_cabling(const std::string &path); // throws TopologyError

// Whether a file is an SMI cabling rather than topology YAML: a .json file,
// or text whose first non-comment line is `A - B`.
bool is_cabling_file(const std::string &path, const std::string &text);

// Namespace-safe host name of an FPGA: "fpga-0001:acl0" -> "f0001-acl0"
// (lower case, [a-z0-9_-], at most 12 characters or the file is refused).
std::string host_name(const std::string &fpga);
// Interface name of a QSFP: "ch0".."ch3".
std::string iface_name(int ch);

// Addresses of one end of a cable: cable i is 10.96.(i/64).(4*(i%64))/30,
// end a .1, end b .2.
struct LinkEnd {
    std::string iface, ip, peer_ip;
    int prefix_len = 30;
};
LinkEnd link_end(const Cabling &c, int rank, int ch); // throws if no cable

// The mesh Topology of the cabling (hosts in rank order).
Topology to_topology(const Cabling &c, const std::string &name);
// A topology name from a file name: its stem ("smi/torus8.json" -> "torus8").
std::string topology_name(const std::string &path);

} // namespace incxdp::topo::smi
