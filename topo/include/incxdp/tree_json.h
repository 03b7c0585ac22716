// SPDX-License-Identifier: BSD-2-Clause
// JSON form of a tree connection (nlohmann's to_json, found by ADL), shared
// by `incxdp rules show -j` and `ref-pcap-switch --plan`.
#pragma once

#include <incxdp/tree.h>

#include <nlohmann/json.hpp>

namespace incxdp::topo {

void to_json(nlohmann::json &j, const RoceConn &c);

} // namespace incxdp::topo
