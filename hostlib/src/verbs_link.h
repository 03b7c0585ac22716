// SPDX-License-Identifier: BSD-2-Clause
// Carrier::Verbs: a Communicator's RoCE collectives through an RDMA
// device's RC QP (verbs_session.h) instead of hostlib's own frames.
#pragma once

#include "roce_packets.h"

#include <incxdp/communicator.h>

#include <memory>

namespace incxdp::detail {

/// Opens the device cfg.verbs names (or the one holding cfg.local_ip's
/// RoCEv2 GID), creates the QP, hands its number to cfg.verbs.publish_qpn
/// and connects it with the PSNs of cfg.roce. Throws std::invalid_argument
/// when libincxdp was built without libibverbs or the config is bad,
/// std::runtime_error / std::system_error naming the device when it fails.
std::unique_ptr<RoceLink> make_verbs_link(const CommConfig &cfg);

} // namespace incxdp::detail
