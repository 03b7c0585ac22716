// SPDX-License-Identifier: BSD-2-Clause
// The torch.distributed backend "incxdp" (docs/PYTORCH.md): a c10d
// ProcessGroup whose collectives run through one incxdp::Communicator.
//
// Collectives are queued and executed in order by one worker thread per
// process group, because a Communicator is not thread-safe and every rank
// must issue the same sequence of collectives. Each call returns at once
// with a WorkIncxdp that completes (or fails) when the worker ran it.
#pragma once

#include <incxdp/communicator.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace incxdp::torch_backend {

/// Where a process group's Communicator comes from. Empty/zero fields are
/// taken from the environment: INCXDP_TOPOLOGY, INCXDP_JOB (default 1),
/// INCXDP_CARRIER ("auto", "socket", "af_xdp", "verbs"; the job gives the
/// protocol) or its older name INCXDP_TRANSPORT ("udp", "afxdp", "roce", ...).
struct BackendOptions {
    std::string topology;
    uint32_t job = 0;
    std::string transport; ///< the older name of carrier
    std::string carrier;
};

/// A queued collective: completes its torch future with the output tensors.
class WorkIncxdp : public c10d::Work {
  public:
    WorkIncxdp(int rank, c10d::OpType type, std::vector<at::Tensor> outputs);

    std::vector<at::Tensor> result() override;
    c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

    /// Called by the worker thread once the collective ran (eptr: it failed).
    void complete(std::exception_ptr eptr);

  private:
    std::vector<at::Tensor> outputs_;
    c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupIncxdp : public c10d::ProcessGroup {
  public:
    /// Opens the Communicator for `rank` of the options' topology job (whose
    /// worker count must be `size`), then waits on `store` until every rank
    /// opened its own, so that no rank's first packet finds a peer unbound.
    ProcessGroupIncxdp(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                       BackendOptions opts, std::chrono::milliseconds timeout);
    /// Runs what is queued, then closes the Communicator (collective).
    ~ProcessGroupIncxdp() override;

    const std::string getBackendName() const override { return "incxdp"; }

    c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor> &tensors,
                                             const c10d::BroadcastOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor> &tensors,
                                             const c10d::AllreduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor> &tensors,
                                          const c10d::ReduceOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>> &outputs,
                                             std::vector<at::Tensor> &inputs,
                                             const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor &output, at::Tensor &input,
                                                   const c10d::AllgatherOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor> &outputs,
                                                  std::vector<std::vector<at::Tensor>> &inputs,
                                                  const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work>
    _reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                         const c10d::ReduceScatterOptions &opts) override;
    c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions &opts) override;

    /// The Communicator's configuration (transport, addresses, job).
    const CommConfig &config() const { return comm_->config(); }

  private:
    struct Task {
        c10::intrusive_ptr<WorkIncxdp> work;
        std::function<void()> run;
    };
    c10::intrusive_ptr<c10d::Work> enqueue(c10d::OpType type, const char *name,
                                           std::vector<at::Tensor> outputs,
                                           std::function<void()> run);
    void worker_loop();

    // The reductions and moves the worker runs, on contiguous host buffers.
    void reduce_into(at::Tensor &t, c10d::ReduceOp op, const char *name, int root);
    void gather_bytes(const void *in, void *out, size_t nbytes);
    void reduce_scatter_flat(at::Tensor &flat, at::Tensor &out, c10d::ReduceOp op,
                             const char *name);

    std::unique_ptr<Communicator> comm_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Task> queue_;
    bool stop_ = false;
    std::thread worker_;
};

/// The creator torch.distributed.Backend.register_backend calls.
c10::intrusive_ptr<c10d::ProcessGroup>
create_process_group(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                     std::chrono::milliseconds timeout, BackendOptions opts);

} // namespace incxdp::torch_backend
