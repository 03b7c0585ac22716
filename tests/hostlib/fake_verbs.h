// SPDX-License-Identifier: BSD-2-Clause
// fake0: an RDMA device defined in place of libibverbs, for the executables
// that link it instead of the library (so a verbs call the fake lacks fails
// the link): VerbsSession's device path runs where there is no RDMA device.
// One device, one ACTIVE Ethernet port (MTU 2048), GIDs 0: RoCEv1 and 2:
// RoCEv2 of 192.0.2.1, 1: RoCEv2 fe80::1, 3: empty. RC between its own QPs
// (fake_verbs_core.cpp) or, in wire mode, with a peer on a netdev
// (fake_verbs_wire.cpp); the verbs themselves refuse what a device would:
// QP states and attribute masks, SGEs outside their MR, CQ events not acked
// before ibv_destroy_cq (fake_verbs_api.cpp). Below: what the tests can ask
// it beyond the verbs API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fakeverbs {

void set_no_ack(uint32_t qpn);                 ///< SENDs to this QP are taken but never ACKed
std::vector<uint32_t> sent_psns(uint32_t qpn); ///< first PSN of every SEND of the QP
std::string take_errors();                     ///< misuse seen so far (and clear it)

/// Wire mode (INCXDP_FAKE_VERBS_IP set): what went over the netdev, printed
/// to stderr at exit with INCXDP_FAKE_VERBS_STATS set.
struct WireStats {
    uint64_t sends = 0, resends = 0;             ///< SEND frames out; of those, go-back-N
    uint64_t results = 0, duplicates = 0;        ///< SENDs in: taken in order; older
    uint64_t acks_in = 0, naks_in = 0;           ///< from the peer
    uint64_t acks_out = 0, naks_out = 0;         ///< to the peer
    uint64_t bad = 0;                            ///< frames to us that failed parse or ICRC
};

} // namespace fakeverbs
