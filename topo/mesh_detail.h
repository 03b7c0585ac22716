// SPDX-License-Identifier: BSD-2-Clause
// Mesh topologies: one builder (mesh_topology.cpp) behind two front ends,
// build_mesh() for code and `kind: mesh` files (mesh_yaml.cpp). The builder
// reports each problem with the spec entry and key it is about, so the file
// front end can point at the line of that key. Internal to incxdp_topo.
#pragma once

#include "incxdp/topology.h"
#include "yaml_reader.h"

#include <cstddef>
#include <functional>
#include <string>

namespace incxdp::topo::detail {

// Which part of a MeshSpec a problem is about; key "" means the entry.
struct MeshWhere {
    enum class Part { Top, Host, Link } part = Part::Top;
    size_t index = 0;
    std::string key;
};

// "links[2]", "hosts[1] (n1)", "link_subnet".
std::string mesh_where_string(const MeshSpec &spec, const MeshWhere &w);

// Must throw; build_mesh_checked() throws a plain TopologyError if it returns.
using MeshReport = std::function<void(const MeshWhere &, const std::string &msg)>;

Topology build_mesh_checked(const MeshSpec &spec, const MeshReport &report);

// Whether the file says `kind: mesh` (a bad kind is reported here).
bool is_mesh(const YamlReader &r, const YAML::Node &root);
Topology parse_mesh(const YamlReader &r, const YAML::Node &root);

// `mtu:` of a file, either kind (topology.cpp).
int parse_mtu(const YamlReader &r, const YAML::Node &root);

} // namespace incxdp::topo::detail
