// SPDX-License-Identifier: BSD-2-Clause
#include "mesh_wire.h"

#include <incxdp/mesh_ctl.h>

#include <fmt/format.h>

#include <arpa/inet.h>
#include <cstring>

namespace incxdp::mesh {

static void fill_hdr(incxdp_mesh_ctl_hdr &h, uint8_t type, NodeId sender, size_t len) {
    h.magic = htons(INCXDP_MESH_CTL_MAGIC);
    h.version = INCXDP_MESH_CTL_VERSION;
    h.type = type;
    h.sender = htonl(sender);
    h.len = htons(static_cast<uint16_t>(len));
    h.reserved = 0;
}

std::vector<uint8_t> encode_hello(const Hello &h) {
    if (h.addrs.size() > INCXDP_MESH_MAX_ADDRS)
        throw MeshError(fmt::format("{} addresses, a hello carries at most {}", h.addrs.size(),
                                    INCXDP_MESH_MAX_ADDRS));
    incxdp_mesh_hello m{};
    fill_hdr(m.hdr, INCXDP_MESH_MSG_HELLO, h.sender, sizeof(m));
    m.link_addr = htonl(h.link_addr);
    std::memcpy(m.mac, h.mac.data(), 6);
    m.naddrs = static_cast<uint8_t>(h.addrs.size());
    m.interval_ms = htons(h.interval_ms);
    m.dead_ms = htons(h.dead_ms);
    for (size_t i = 0; i < h.addrs.size(); i++)
        m.addrs[i] = htonl(h.addrs[i]);
    const auto *p = reinterpret_cast<const uint8_t *>(&m);
    return {p, p + sizeof(m)};
}

std::vector<uint8_t> encode_lsa(const Lsa &lsa, NodeId sender) {
    if (lsa.addrs.size() > INCXDP_MESH_MAX_ADDRS || lsa.links.size() > INCXDP_MESH_MAX_NEIGHBOURS)
        throw MeshError(fmt::format("LSA of {} has {} addresses and {} links, at most {} and {}",
                                    id_str(lsa.origin), lsa.addrs.size(), lsa.links.size(),
                                    INCXDP_MESH_MAX_ADDRS, INCXDP_MESH_MAX_NEIGHBOURS));
    incxdp_mesh_lsa m{};
    fill_hdr(m.hdr, INCXDP_MESH_MSG_LSA, sender, sizeof(m));
    m.origin = htonl(lsa.origin);
    m.seq = htonl(lsa.seq);
    m.naddrs = static_cast<uint8_t>(lsa.addrs.size());
    m.nlinks = static_cast<uint8_t>(lsa.links.size());
    for (size_t i = 0; i < lsa.addrs.size(); i++)
        m.addrs[i] = htonl(lsa.addrs[i]);
    for (size_t i = 0; i < lsa.links.size(); i++) {
        m.links[i].node = htonl(lsa.links[i].node);
        m.links[i].local_addr = htonl(lsa.links[i].local_addr);
        m.links[i].peer_addr = htonl(lsa.links[i].peer_addr);
    }
    const auto *p = reinterpret_cast<const uint8_t *>(&m);
    return {p, p + sizeof(m)};
}

Message decode(const uint8_t *data, size_t len) {
    incxdp_mesh_ctl_hdr h{};
    if (len < sizeof(h))
        throw MeshError(fmt::format("{} bytes, shorter than the {}-byte header", len, sizeof(h)));
    std::memcpy(&h, data, sizeof(h));
    if (ntohs(h.magic) != INCXDP_MESH_CTL_MAGIC)
        throw MeshError(fmt::format("bad magic {:#06x}", ntohs(h.magic)));
    if (h.version != INCXDP_MESH_CTL_VERSION)
        throw MeshError(fmt::format("version {}, expected {}", h.version, INCXDP_MESH_CTL_VERSION));
    const size_t want = h.type == INCXDP_MESH_MSG_HELLO ? sizeof(incxdp_mesh_hello)
                        : h.type == INCXDP_MESH_MSG_LSA ? sizeof(incxdp_mesh_lsa)
                                                        : 0;
    if (want == 0)
        throw MeshError(fmt::format("unknown message type {}", h.type));
    if (len != want || ntohs(h.len) != want)
        throw MeshError(fmt::format("type {} of {} bytes (header says {}), expected {}", h.type,
                                    len, ntohs(h.len), want));
    Message out;
    out.sender = ntohl(h.sender);
    if (h.type == INCXDP_MESH_MSG_HELLO) {
        incxdp_mesh_hello m;
        std::memcpy(&m, data, sizeof(m));
        if (m.naddrs > INCXDP_MESH_MAX_ADDRS)
            throw MeshError(fmt::format("hello with {} addresses", m.naddrs));
        Hello hello;
        hello.sender = out.sender;
        hello.link_addr = ntohl(m.link_addr);
        std::memcpy(hello.mac.data(), m.mac, 6);
        hello.interval_ms = ntohs(m.interval_ms);
        hello.dead_ms = ntohs(m.dead_ms);
        for (unsigned i = 0; i < m.naddrs; i++)
            hello.addrs.push_back(ntohl(m.addrs[i]));
        out.hello = std::move(hello);
    } else {
        incxdp_mesh_lsa m;
        std::memcpy(&m, data, sizeof(m));
        if (m.naddrs > INCXDP_MESH_MAX_ADDRS || m.nlinks > INCXDP_MESH_MAX_NEIGHBOURS)
            throw MeshError(fmt::format("LSA with {} addresses and {} links", m.naddrs, m.nlinks));
        Lsa lsa;
        lsa.origin = ntohl(m.origin);
        lsa.seq = ntohl(m.seq);
        for (unsigned i = 0; i < m.naddrs; i++)
            lsa.addrs.push_back(ntohl(m.addrs[i]));
        for (unsigned i = 0; i < m.nlinks; i++)
            lsa.links.push_back({ntohl(m.links[i].node), ntohl(m.links[i].local_addr),
                                 ntohl(m.links[i].peer_addr)});
        out.lsa = std::move(lsa);
    }
    return out;
}

} // namespace incxdp::mesh
