// SPDX-License-Identifier: BSD-2-Clause
// `incxdp mesh run`: the per-node discovery and routing daemon. Hellos find
// the neighbours on every interface, LSAs flood every node's links through
// the mesh, BFS over the two-way links gives the routes, which go into the
// relay's forwarding table; the state file shows all of it.
// docs/MESH.md §Discovery and routing.
#pragma once

#include "mesh_config.h"
#include "mesh_graph.h"

#include <incxdp/topology.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace incxdp::mesh {

struct Timers {
    uint32_t hello_ms = 100;        // hello on every interface this often
    uint32_t dead_ms = 400;         // 4 missed hellos: the neighbour is down (--dead-ms)
    uint32_t lsa_refresh_ms = 1000; // re-originate our LSA this often (and on change)
    uint32_t lsa_max_age_ms = 4000; // forget a node whose LSA was not refreshed for this long
};

struct DaemonOptions {
    Knobs knobs;
    Timers timers;
    bool xdp = true;        // false: discovery and routes only, no relay attached
    std::string state_file; // empty: state_path(knobs.pin_dir)
};

// Runs in the foreground until SIGINT or SIGTERM, then detaches the relay
// and removes its pins and the state file. Throws MeshError (or the relay's
// CtlError) if it cannot start.
void run_daemon(const DaemonOptions &opts);

// Where the daemon of pin_dir keeps its state: bpffs holds only pins, so
// /run/incxdp/mesh<pin_dir>/mesh.json.
std::string state_path(const std::string &pin_dir);

// ---- what the state file holds (mesh_state.cpp) ------------------------------

struct LocalIface {
    std::string name;
    uint32_t ifindex = 0;
    uint32_t addr = 0; // host order; its first IPv4 address
    int prefix_len = 0;
    uint32_t bcast = 0; // where hellos and LSAs go
    topo::Mac mac{};
    bool up = false; // IFF_UP and IFF_RUNNING (carrier)
    int fd = -1;     // its UDP socket, bound to the device
};

struct Neighbour {
    NodeId node = 0;
    size_t iface = 0;  // index into the daemon's interfaces
    uint32_t addr = 0; // its address on the link
    topo::Mac mac{};
    std::vector<uint32_t> addrs;
    uint64_t last_ms = 0, since_ms = 0;
};

struct DaemonView {
    NodeId self = 0;
    std::vector<uint32_t> addrs;
    const std::vector<LocalIface> *ifaces = nullptr;
    const std::vector<Neighbour> *neighbours = nullptr;
    const Lsdb *lsdb = nullptr;
    const RouteTable *routes = nullptr;
    std::string topology;
    std::vector<std::string> errors;
    const Knobs *knobs = nullptr;
    Timers timers;
    bool relay_attached = false;
    uint64_t now_ms = 0;
    int64_t last_change_unix_ms = 0;
};

nlohmann::json state_json(const DaemonView &v);
// Writes a temporary file next to `path` and renames it over: readers see
// the old state or the new one, never half of one.
void write_state(const std::string &path, const nlohmann::json &j);
// `incxdp mesh show`'s human output of a state.
std::string format_show(const nlohmann::json &state);

} // namespace incxdp::mesh
