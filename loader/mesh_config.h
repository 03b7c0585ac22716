// SPDX-License-Identifier: BSD-2-Clause
// The mesh daemon's knobs and where each came from: flag > environment >
// config file > default (docs/MESH.md §incxdp mesh).
#pragma once

#include "mesh_graph.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace incxdp::mesh {

// Knobs one source sets; unset ones fall through to the next source.
struct KnobSet {
    std::optional<std::vector<std::string>> ifaces; // empty vector = all
    std::optional<std::string> pin_dir;
    std::optional<bool> relay;
    std::optional<uint32_t> max_hops;
    std::optional<TopoOverride> topology;
    std::optional<std::string> mode; // "native" | "skb"
};

struct Knobs {
    std::vector<std::string> ifaces; // empty: every up non-loopback IPv4 interface
    std::string pin_dir;
    bool relay = true;
    uint32_t max_hops = 4;
    TopoOverride topology = TopoOverride::Auto;
    std::string mode = "native";
    // knob name -> "flag", "env", "file" or "default"
    std::map<std::string, std::string> source;
};

// "on"/"off", "1"/"0", "true"/"false", "yes"/"no"; throws MeshError naming `what`.
bool parse_on_off(const std::string &s, const std::string &what);
uint32_t parse_max_hops(const std::string &s, const std::string &what); // 1..255
std::string parse_mode(const std::string &s, const std::string &what);  // native|skb
// "a,b,c" or "all" (= empty).
std::vector<std::string> parse_iface_list(const std::string &s);

// INCXDP_MESH_RELAY, INCXDP_MESH_MAX_HOPS, INCXDP_MESH_TOPOLOGY,
// INCXDP_MESH_PIN_DIR, read through `getenv` (tests pass their own).
KnobSet knobs_from_env(const std::function<const char *(const char *)> &getenv);
// YAML mapping with keys ifaces (list or "all"), pin-dir, relay, max-hops,
// topology, mode; unknown keys are errors naming file:line:col.
KnobSet knobs_from_yaml(const std::string &text, const std::string &source);
KnobSet knobs_from_file(const std::string &path);

// Merges by precedence; default_pin_dir is the last resort for pin_dir.
Knobs resolve_knobs(const KnobSet &flags, const KnobSet &env, const KnobSet &file,
                    const std::string &default_pin_dir);

} // namespace incxdp::mesh
