// SPDX-License-Identifier: BSD-2-Clause
// Encoding and decoding the mesh daemon's control messages
// (bpf/include/incxdp/mesh_ctl.h), pure.
#pragma once

#include "mesh_graph.h"

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace incxdp::mesh {

struct Hello {
    NodeId sender = 0;
    uint32_t link_addr = 0; // host order
    std::array<uint8_t, 6> mac{};
    uint16_t interval_ms = 0, dead_ms = 0;
    std::vector<uint32_t> addrs; // host order
    bool operator==(const Hello &) const = default;
};

std::vector<uint8_t> encode_hello(const Hello &h);
// sender: the node putting the LSA on the link (the originator or a flooder).
std::vector<uint8_t> encode_lsa(const Lsa &lsa, NodeId sender);

// A received datagram. Throws MeshError naming what is wrong (size, magic,
// version, type, counts) for anything that is not one of our messages.
struct Message {
    NodeId sender = 0;
    std::optional<Hello> hello;
    std::optional<Lsa> lsa;
};
Message decode(const uint8_t *data, size_t len);

} // namespace incxdp::mesh
