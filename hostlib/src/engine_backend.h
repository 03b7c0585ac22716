// SPDX-License-Identifier: BSD-2-Clause
// The one engine interface of the Communicator (docs/HOSTLIB.md §9): every
// collective is a Call handed to a backend, which owns how the call reaches
// the switches. The window backend speaks the native or SwitchML header to a
// star or a native UDP tree (engine.h); the RoCE backend speaks RoCEv2 to a
// roce-tree job (roce_engine.h, or an RDMA device: verbs_link.h).
// AllGather, ReduceScatter and AVG are built above this interface, once.
#pragma once

#include "roce_packets.h"

#include <incxdp/communicator.h>
#include <incxdp/reduce_op.h>
#include <incxdp/transport.h>

#include <cstddef>
#include <cstdint>
#include <memory>

namespace incxdp::detail {

/// The primitives every backend carries.
enum class Prim : uint8_t { AllReduce, Reduce, Broadcast, Barrier };

/// One collective as a backend takes it. op is Sum, Max or Min: the
/// Communicator turned Avg into Sum before.
struct Call {
    Prim prim = Prim::AllReduce;
    DType dtype = DType::Int32;
    ReduceOp op = ReduceOp::Sum;
    uint32_t root = 0; ///< Reduce/Broadcast
    const void *send = nullptr;
    void *recv = nullptr; ///< Broadcast: the buffer (send == recv); Reduce: root only, else null
    size_t count = 0;     ///< elements; Barrier: 0
};

class EngineBackend {
  public:
    virtual ~EngineBackend() = default;

    /// Run one collective; its counters go to `stats`. Throws
    /// std::invalid_argument (bad input or an op the wire cannot carry)
    /// before anything is sent, CommTimeout / CommInterrupted after, and
    /// then failed() is true.
    virtual void run(const Call &c, const char *what, CommStats &stats) = 0;

    /// Leave the switches ready for a later communicator on the same job;
    /// the counters of any packets this sends go to `stats`.
    virtual void close(CommStats &stats) = 0;

    /// A collective failed after sending: the switches' state for this rank
    /// is unknown, so the communicator is unusable.
    bool failed() const { return failed_; }

  protected:
    bool failed_ = false;
};

/// The window engine: UDP socket or AF_XDP, native or SwitchML header, a
/// star or a native UDP tree (the hosts of a tree speak to their leaf as to
/// a star's switch).
std::unique_ptr<EngineBackend> make_window_backend(const CommConfig &cfg, Transport &transport);

/// RoCEv2 to a roce-tree job over the rank's RC connection `link` (hostlib's
/// own frames over AF_XDP, or an RDMA device: carrier.h opens it). `frames`:
/// the Transport under the link, null for a device.
std::unique_ptr<EngineBackend>
make_roce_backend(const CommConfig &cfg, std::unique_ptr<RoceLink> link, const Transport *frames);

} // namespace incxdp::detail
