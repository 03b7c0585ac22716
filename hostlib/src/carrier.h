// SPDX-License-Identifier: BSD-2-Clause
// Opening a carrier for a protocol (docs/HOSTLIB.md §5): the one table of
// valid (protocol, carrier) pairs and what opens each lives in carrier.cpp,
// and nothing else in hostlib branches on the pair.
#pragma once

#include "roce_packets.h"

#include <incxdp/communicator.h>
#include <incxdp/transport.h>

#include <memory>

namespace incxdp::detail {

/// What a carrier opened for the Communicator's backend.
struct Carried {
    /// The frames' pipe (socket or AF_XDP); null when an RDMA device
    /// carries the connection itself.
    std::unique_ptr<Transport> transport;
    /// Protocol::Roce: the rank's RC connection, over `transport` or the
    /// device. Null for Protocol::Native.
    std::unique_ptr<RoceLink> roce;
};

/// Open cfg.carrier for cfg.protocol. Auto becomes what was opened (see
/// Carrier::Auto). Keeps a reference to cfg (the RoCE engine reads it on
/// every call): cfg must outlive the result. Throws std::invalid_argument
/// for a refused pair, std::system_error when the carrier cannot be opened.
Carried open_carrier(CommConfig &cfg);

/// A caller's transport as the carrier of cfg.protocol (tests). Throws
/// std::invalid_argument for Carrier::Verbs, whose device is the carrier.
Carried carry_over(const CommConfig &cfg, std::unique_ptr<Transport> transport);

} // namespace incxdp::detail
