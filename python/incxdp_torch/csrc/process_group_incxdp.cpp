// SPDX-License-Identifier: BSD-2-Clause
#include "process_group_incxdp.h"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace incxdp::torch_backend {

namespace {

// torch's own names (torch.float64), which users know, not c10's (Double).
std::string torch_type_name(at::ScalarType t) {
    switch (t) {
    case at::kFloat:
        return "torch.float32";
    case at::kDouble:
        return "torch.float64";
    case at::kHalf:
        return "torch.float16";
    case at::kBFloat16:
        return "torch.bfloat16";
    case at::kInt:
        return "torch.int32";
    case at::kLong:
        return "torch.int64";
    case at::kShort:
        return "torch.int16";
    case at::kChar:
        return "torch.int8";
    case at::kByte:
        return "torch.uint8";
    case at::kBool:
        return "torch.bool";
    case at::kComplexFloat:
        return "torch.complex64";
    case at::kComplexDouble:
        return "torch.complex128";
    default:
        return std::string("torch.") + c10::toString(t);
    }
}

const char *op_name(c10d::ReduceOp op) {
    switch (op.op_) {
    case c10d::ReduceOp::SUM:
        return "SUM";
    case c10d::ReduceOp::AVG:
        return "AVG";
    case c10d::ReduceOp::PRODUCT:
        return "PRODUCT";
    case c10d::ReduceOp::MIN:
        return "MIN";
    case c10d::ReduceOp::MAX:
        return "MAX";
    case c10d::ReduceOp::BAND:
        return "BAND";
    case c10d::ReduceOp::BOR:
        return "BOR";
    case c10d::ReduceOp::BXOR:
        return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
        return "PREMUL_SUM";
    default:
        return "UNUSED";
    }
}

void check_host_tensor(const at::Tensor &t, const char *name) {
    TORCH_CHECK(t.device().is_cpu(), "incxdp ", name, ": tensors must be on the CPU, got one on ",
                t.device());
    TORCH_CHECK(t.layout() == at::kStrided, "incxdp ", name, ": tensors must be dense, got layout ",
                t.layout());
}

// The switch adds int32; float32 travels quantised (docs/HOSTLIB.md §4), and
// float16/bfloat16 are widened to float32 on the host, which loses nothing.
void check_reducible(const at::Tensor &t, const char *name) {
    check_host_tensor(t, name);
    switch (t.scalar_type()) {
    case at::kFloat:
    case at::kHalf:
    case at::kBFloat16:
    case at::kInt:
        return;
    default:
        TORCH_CHECK(
            false, "incxdp ", name, ": unsupported tensor type ", torch_type_name(t.scalar_type()),
            "; reductions take torch.float32, torch.float16, torch.bfloat16 and torch.int32");
    }
}

void check_op(c10d::ReduceOp op, const at::Tensor &t, const char *name) {
    switch (op.op_) {
    case c10d::ReduceOp::SUM:
    case c10d::ReduceOp::MAX:
    case c10d::ReduceOp::MIN:
        return;
    case c10d::ReduceOp::AVG:
        TORCH_CHECK(t.scalar_type() != at::kInt, "incxdp ", name,
                    ": AVG needs a floating-point tensor, got torch.int32");
        return;
    default:
        TORCH_CHECK(false, "incxdp ", name, ": unsupported reduce op ", op_name(op),
                    "; supported: SUM, AVG, MAX, MIN");
    }
}

void check_one(const std::vector<at::Tensor> &v, const char *name) {
    TORCH_CHECK(v.size() == 1, "incxdp ", name, ": expects exactly one tensor per rank, got ",
                v.size());
}

ReduceOp wire_op(c10d::ReduceOp op) {
    switch (op.op_) {
    case c10d::ReduceOp::MAX:
        return ReduceOp::Max;
    case c10d::ReduceOp::MIN:
        return ReduceOp::Min;
    case c10d::ReduceOp::AVG:
        return ReduceOp::Avg;
    default:
        return ReduceOp::Sum;
    }
}

// The reduction buffer of `t`: t itself when it is a contiguous float32 or
// int32 tensor, a contiguous float32 copy otherwise (copied back afterwards).
at::Tensor reduction_buffer(const at::Tensor &t) {
    if (t.scalar_type() == at::kInt || t.scalar_type() == at::kFloat)
        return t.contiguous();
    return t.to(at::kFloat).contiguous();
}

DType wire_dtype(const at::Tensor &buf) {
    return buf.scalar_type() == at::kInt ? DType::Int32 : DType::Float32;
}

std::string env_or(const char *name, const std::string &fallback) {
    const char *v = std::getenv(name);
    return v && *v ? std::string(v) : fallback;
}

BackendOptions resolve(BackendOptions o) {
    if (o.topology.empty())
        o.topology = env_or("INCXDP_TOPOLOGY", "");
    if (o.job == 0) {
        std::string j = env_or("INCXDP_JOB", "1");
        try {
            o.job = uint32_t(std::stoul(j));
        } catch (const std::exception &) {
            TORCH_CHECK(false, "incxdp: INCXDP_JOB=", j, " is not a job id");
        }
    }
    // set_options() wins over the environment.
    if (o.transport.empty() && o.carrier.empty()) {
        o.transport = env_or("INCXDP_TRANSPORT", "");
        o.carrier = env_or("INCXDP_CARRIER", "");
    }
    TORCH_CHECK(!o.topology.empty(), "incxdp: no topology file: set INCXDP_TOPOLOGY or "
                                     "incxdp_torch.set_options(topology=...)");
    return o;
}

} // namespace

WorkIncxdp::WorkIncxdp(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
    : c10d::Work(rank, type), outputs_(std::move(outputs)),
      future_(
          c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()))) {
}

std::vector<at::Tensor> WorkIncxdp::result() {
    return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkIncxdp::getFuture() {
    return future_;
}

void WorkIncxdp::complete(std::exception_ptr eptr) {
    finish(eptr);
    if (eptr)
        future_->setError(eptr);
    else
        future_->markCompleted(c10::IValue(outputs_));
}

ProcessGroupIncxdp::ProcessGroupIncxdp(const c10::intrusive_ptr<c10d::Store> &store, int rank,
                                       int size, BackendOptions opts,
                                       std::chrono::milliseconds timeout)
    : c10d::ProcessGroup(rank, size) {
    opts = resolve(std::move(opts));
    CommConfig cfg;
    try {
        cfg = CommConfig::from_topology(opts.topology, opts.job, uint32_t(rank));
    } catch (const std::exception &e) {
        TORCH_CHECK(false, "incxdp: rank ", rank, ": ", e.what());
    }
    TORCH_CHECK(cfg.world_size == uint32_t(size), "incxdp: job ", opts.job, " of ", opts.topology,
                " has ", cfg.world_size, " workers, but torch.distributed runs ", size, " ranks");
    TORCH_CHECK(opts.carrier.empty() || opts.transport.empty() || opts.carrier == opts.transport,
                "incxdp: carrier ", opts.carrier, " and transport ", opts.transport,
                " both given: set only the carrier (INCXDP_CARRIER)");
    try {
        cfg.use_carrier(opts.carrier.empty() ? opts.transport : opts.carrier,
                        "job " + std::to_string(opts.job) + " of " + opts.topology);
    } catch (const std::exception &e) {
        TORCH_CHECK(false, "incxdp: rank ", rank, ": ", e.what());
    }
    try {
        comm_ = std::make_unique<Communicator>(cfg);
    } catch (const std::exception &e) {
        TORCH_CHECK(false, "incxdp: rank ", rank, " of job ", opts.job, " (", opts.topology, ", ",
                    cfg.transport_name(), "): ", e.what());
    }
    // Every rank's socket must be open before anyone's first packet: the
    // switch multicasts results, and one sent to an unbound port is only
    // recovered by a retransmission timeout.
    const std::string key = "incxdp/ready";
    store->add(key, 1);
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (int64_t n; (n = store->add(key, 0)) < size;) {
        TORCH_CHECK(std::chrono::steady_clock::now() < deadline, "incxdp: rank ", rank, ": only ",
                    n, " of ", size, " ranks opened their communicator within ", timeout.count(),
                    " ms");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    worker_ = std::thread([this] { worker_loop(); });
}

ProcessGroupIncxdp::~ProcessGroupIncxdp() {
    {
        std::lock_guard<std::mutex> lk(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (worker_.joinable())
        worker_.join();
    comm_.reset();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupIncxdp::enqueue(c10d::OpType type, const char *name,
                                                           std::vector<at::Tensor> outputs,
                                                           std::function<void()> run) {
    auto work = c10::make_intrusive<WorkIncxdp>(rank_, type, std::move(outputs));
    auto body = [this, name, run = std::move(run)] {
        try {
            run();
        } catch (const c10::Error &e) {
            throw std::runtime_error(std::string("incxdp ") + name + " on rank " +
                                     std::to_string(rank_) + ": " + e.what_without_backtrace());
        } catch (const std::exception &e) {
            throw std::runtime_error(std::string("incxdp ") + name + " on rank " +
                                     std::to_string(rank_) + ": " + e.what());
        }
    };
    {
        std::lock_guard<std::mutex> lk(mu_);
        TORCH_CHECK(!stop_, "incxdp ", name, ": the process group is shutting down");
        queue_.push_back(Task{work, std::move(body)});
    }
    cv_.notify_one();
    return work;
}

void ProcessGroupIncxdp::worker_loop() {
    for (;;) {
        Task task;
        {
            std::unique_lock<std::mutex> lk(mu_);
            cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
            if (queue_.empty())
                return;
            task = std::move(queue_.front());
            queue_.pop_front();
        }
        std::exception_ptr eptr;
        try {
            task.run();
        } catch (...) {
            eptr = std::current_exception();
        }
        task.work->complete(eptr);
    }
}

void ProcessGroupIncxdp::reduce_into(at::Tensor &t, c10d::ReduceOp op, const char *name, int root) {
    (void)name;
    if (t.numel() == 0)
        return;
    at::Tensor buf = reduction_buffer(t);
    const bool keeps = root < 0 || root == rank_;
    if (root < 0)
        comm_->allreduce(buf.data_ptr(), buf.data_ptr(), size_t(buf.numel()), wire_dtype(buf),
                         wire_op(op));
    else
        comm_->reduce(buf.data_ptr(), keeps ? buf.data_ptr() : nullptr, size_t(buf.numel()),
                      wire_dtype(buf), wire_op(op), uint32_t(root));
    if (keeps && !buf.is_same(t))
        t.copy_(buf);
}

// Data movement is bit for bit: the bytes travel as int32 words (an int32
// sum with zeros from every other rank on star jobs), whatever the dtype.
void ProcessGroupIncxdp::gather_bytes(const void *in, void *out, size_t nbytes) {
    if (nbytes == 0)
        return;
    if (nbytes % 4 == 0) {
        comm_->allgather(in, out, nbytes / 4, DType::Int32);
        return;
    }
    const size_t words = (nbytes + 3) / 4;
    std::vector<int32_t> own(words, 0), blocks(words * size_t(size_));
    std::memcpy(own.data(), in, nbytes);
    comm_->allgather(own.data(), blocks.data(), words, DType::Int32);
    auto *o = static_cast<unsigned char *>(out);
    for (int r = 0; r < size_; ++r)
        std::memcpy(o + size_t(r) * nbytes, blocks.data() + size_t(r) * words, nbytes);
}

void ProcessGroupIncxdp::reduce_scatter_flat(at::Tensor &flat, at::Tensor &out, c10d::ReduceOp op,
                                             const char *name) {
    (void)name;
    if (out.numel() == 0)
        return;
    at::Tensor buf = reduction_buffer(out);
    comm_->reduce_scatter(flat.data_ptr(), buf.data_ptr(), size_t(buf.numel()), wire_dtype(buf),
                          wire_op(op));
    if (!buf.is_same(out))
        out.copy_(buf);
}

static void broadcast_tensor(Communicator &comm, at::Tensor &t, int root) {
    at::Tensor c = t.contiguous();
    const size_t nbytes = c.nbytes();
    if (nbytes == 0)
        return;
    if (nbytes % 4 == 0) {
        comm.broadcast(c.data_ptr(), nbytes / 4, DType::Int32, uint32_t(root));
    } else {
        std::vector<int32_t> words((nbytes + 3) / 4, 0);
        std::memcpy(words.data(), c.data_ptr(), nbytes);
        comm.broadcast(words.data(), words.size(), DType::Int32, uint32_t(root));
        std::memcpy(c.data_ptr(), words.data(), nbytes);
    }
    if (!c.is_same(t))
        t.copy_(c);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupIncxdp::broadcast(std::vector<at::Tensor> &tensors,
                                                             const c10d::BroadcastOptions &opts) {
    check_one(tensors, "broadcast");
    check_host_tensor(tensors[0], "broadcast");
    TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "incxdp broadcast: root ",
                opts.rootRank, " is not a rank of ", size_);
    at::Tensor t = tensors[0];
    int root = int(opts.rootRank);
    return enqueue(c10d::OpType::BROADCAST, "broadcast", tensors,
                   [this, t, root]() mutable { broadcast_tensor(*comm_, t, root); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupIncxdp::allreduce(std::vector<at::Tensor> &tensors,
                                                             const c10d::AllreduceOptions &opts) {
    check_one(tensors, "allreduce");
    check_reducible(tensors[0], "allreduce");
    check_op(opts.reduceOp, tensors[0], "allreduce");
    at::Tensor t = tensors[0];
    auto op = opts.reduceOp;
    return enqueue(c10d::OpType::ALLREDUCE, "allreduce", tensors,
                   [this, t, op]() mutable { reduce_into(t, op, "allreduce", -1); });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupIncxdp::reduce(std::vector<at::Tensor> &tensors,
                                                          const c10d::ReduceOptions &opts) {
    check_one(tensors, "reduce");
    check_reducible(tensors[0], "reduce");
    check_op(opts.reduceOp, tensors[0], "reduce");
    TORCH_CHECK(opts.rootRank >= 0 && opts.rootRank < size_, "incxdp reduce: root ", opts.rootRank,
                " is not a rank of ", size_);
    at::Tensor t = tensors[0];
    auto op = opts.reduceOp;
    int root = int(opts.rootRank);
    return enqueue(c10d::OpType::REDUCE, "reduce", tensors,
                   [this, t, op, root]() mutable { reduce_into(t, op, "reduce", root); });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupIncxdp::allgather(std::vector<std::vector<at::Tensor>> &outputs,
                              std::vector<at::Tensor> &inputs, const c10d::AllgatherOptions &) {
    check_one(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1, "incxdp allgather: expects one output list, got ",
                outputs.size());
    const at::Tensor &in = inputs[0];
    check_host_tensor(in, "allgather");
    TORCH_CHECK(outputs[0].size() == size_t(size_), "incxdp allgather: expects ", size_,
                " output tensors (one per rank), got ", outputs[0].size());
    for (const auto &o : outputs[0]) {
        check_host_tensor(o, "allgather");
        TORCH_CHECK(o.scalar_type() == in.scalar_type() && o.numel() == in.numel(),
                    "incxdp allgather: every output tensor must have the input's type and size");
    }
    at::Tensor src = in;
    std::vector<at::Tensor> outs = outputs[0];
    return enqueue(c10d::OpType::ALLGATHER, "allgather", outs, [this, src, outs]() mutable {
        at::Tensor c = src.contiguous();
        at::Tensor flat = at::empty({int64_t(size_) * c.numel()}, c.options());
        gather_bytes(c.data_ptr(), flat.data_ptr(), c.nbytes());
        for (int r = 0; r < size_; ++r)
            outs[size_t(r)].copy_(
                flat.narrow(0, r * c.numel(), c.numel()).view(outs[size_t(r)].sizes()));
    });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupIncxdp::_allgather_base(at::Tensor &output,
                                                                   at::Tensor &input,
                                                                   const c10d::AllgatherOptions &) {
    check_host_tensor(input, "allgather");
    check_host_tensor(output, "allgather");
    TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                    output.numel() == int64_t(size_) * input.numel(),
                "incxdp allgather: the output must have the input's type and ", size_,
                " times its size");
    at::Tensor in = input, out = output;
    return enqueue(c10d::OpType::_ALLGATHER_BASE, "allgather", {output}, [this, in, out]() mutable {
        at::Tensor c = in.contiguous();
        at::Tensor o = out.contiguous();
        gather_bytes(c.data_ptr(), o.data_ptr(), c.nbytes());
        if (!o.is_same(out))
            out.copy_(o);
    });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupIncxdp::reduce_scatter(std::vector<at::Tensor> &outputs,
                                   std::vector<std::vector<at::Tensor>> &inputs,
                                   const c10d::ReduceScatterOptions &opts) {
    check_one(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1, "incxdp reduce_scatter: expects one input list, got ",
                inputs.size());
    const at::Tensor &out = outputs[0];
    check_reducible(out, "reduce_scatter");
    check_op(opts.reduceOp, out, "reduce_scatter");
    TORCH_CHECK(inputs[0].size() == size_t(size_), "incxdp reduce_scatter: expects ", size_,
                " input tensors (one per rank), got ", inputs[0].size());
    for (const auto &i : inputs[0]) {
        check_host_tensor(i, "reduce_scatter");
        TORCH_CHECK(
            i.scalar_type() == out.scalar_type() && i.numel() == out.numel(),
            "incxdp reduce_scatter: every input tensor must have the output's type and size");
    }
    std::vector<at::Tensor> ins = inputs[0];
    at::Tensor o = out;
    auto op = opts.reduceOp;
    return enqueue(c10d::OpType::REDUCE_SCATTER, "reduce_scatter", outputs,
                   [this, ins, o, op]() mutable {
                       std::vector<at::Tensor> parts;
                       for (const auto &i : ins)
                           parts.push_back(i.reshape({-1}));
                       at::Tensor flat = reduction_buffer(at::cat(parts));
                       reduce_scatter_flat(flat, o, op, "reduce_scatter");
                   });
}

c10::intrusive_ptr<c10d::Work>
ProcessGroupIncxdp::_reduce_scatter_base(at::Tensor &output, at::Tensor &input,
                                         const c10d::ReduceScatterOptions &opts) {
    check_reducible(output, "reduce_scatter");
    check_reducible(input, "reduce_scatter");
    check_op(opts.reduceOp, output, "reduce_scatter");
    TORCH_CHECK(output.scalar_type() == input.scalar_type() &&
                    input.numel() == int64_t(size_) * output.numel(),
                "incxdp reduce_scatter: the input must have the output's type and ", size_,
                " times its size");
    at::Tensor in = input, o = output;
    auto op = opts.reduceOp;
    return enqueue(c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter", {output},
                   [this, in, o, op]() mutable {
                       at::Tensor flat = reduction_buffer(in.reshape({-1}));
                       reduce_scatter_flat(flat, o, op, "reduce_scatter");
                   });
}

c10::intrusive_ptr<c10d::Work> ProcessGroupIncxdp::barrier(const c10d::BarrierOptions &) {
    return enqueue(c10d::OpType::BARRIER, "barrier", {}, [this] { comm_->barrier(); });
}

c10::intrusive_ptr<c10d::ProcessGroup>
create_process_group(const c10::intrusive_ptr<c10d::Store> &store, int rank, int size,
                     std::chrono::milliseconds timeout, BackendOptions opts) {
    return c10::make_intrusive<ProcessGroupIncxdp>(store, rank, size, std::move(opts), timeout);
}

} // namespace incxdp::torch_backend
