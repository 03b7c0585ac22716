// SPDX-License-Identifier: BSD-2-Clause
// End-to-end: 4 Communicators on their own threads and UDP ports against the
// userspace reference switch, lossless and with deterministic loss,
// duplication and late replays. No timing assertions.
#include "pause_gate.h"
#include "ref_switch.h"
#include "parallel_ranks.h"
#include "test_data.h"

#include <incxdp/communicator.h>
#include <incxdp/quantize.h>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <limits>
#include <random>
#include <thread>
#include <vector>

using namespace incxdp;
using namespace incxdp::test;

namespace {

constexpr uint32_t kJob = 7;
const size_t kSizes[] = {1, 15, 16, 833, 100000};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min};

struct ClusterOptions {
    Wire wire = Wire::Native;
    uint32_t ranks = 4;
    uint32_t window = 8;
    uint32_t elems = 0;
    double drop = 0, dup = 0, late = 0;
    std::chrono::milliseconds deadline{20000};
    uint32_t max_retries = 0;
    const std::atomic<bool> *stop = nullptr;
};

class Cluster {
  public:
    explicit Cluster(ClusterOptions o) : o_(o) {
        RefSwitchConfig sc;
        sc.wire = o.wire;
        sc.job = kJob;
        sc.slots = o.window;
        sc.drop = o.drop;
        sc.dup = o.dup;
        sc.late = o.late;
        for (uint32_t r = 0; r < o.ranks; ++r)
            sc.worker_ports.push_back(free_udp_port());
        sw_ = std::make_unique<RefSwitch>(sc);
        ports_ = sc.worker_ports;
        open();
    }
    ~Cluster() { close_all(); }

    CommConfig config(uint32_t rank) const {
        CommConfig c;
        c.rank = rank;
        c.world_size = o_.ranks;
        c.job = kJob;
        c.switch_ip = "127.0.0.1";
        c.switch_port = sw_->port();
        c.local_ip = "127.0.0.1";
        c.local_port = ports_[rank];
        c.window = o_.window;
        c.elems_per_packet = o_.elems;
        c.wire = o_.wire;
        c.deadline = o_.deadline;
        c.max_retries = o_.max_retries;
        c.stop = o_.stop;
        return c;
    }

    void open() {
        for (uint32_t r = 0; r < o_.ranks; ++r)
            comms_.push_back(std::make_unique<Communicator>(config(r)));
    }

    // close() is collective: every rank on its own thread.
    void close_all() {
        if (comms_.empty())
            return;
        parallel([](uint32_t, Communicator &c) { c.close(); });
        comms_.clear();
    }

    // Destroy without close(): the destructors park, also collectively.
    void destroy_all() {
        std::vector<std::thread> t;
        for (auto &c : comms_)
            t.emplace_back([&c] { c.reset(); });
        for (auto &th : t)
            th.join();
        comms_.clear();
    }

    // f on every rank (or the first `ranks`) in parallel (parallel_ranks.h).
    std::vector<std::exception_ptr> parallel(const RankFn &f, uint32_t ranks = 0) {
        return run_ranks(comms_, ranks ? ranks : o_.ranks, f);
    }

    void parallel_ok(const RankFn &f) { expect_no_errors(parallel(f)); }

    RefSwitch &sw() { return *sw_; }
    Communicator &comm(uint32_t r) { return *comms_[r]; }
    const ClusterOptions &opts() const { return o_; }

  private:
    ClusterOptions o_;
    std::unique_ptr<RefSwitch> sw_;
    std::vector<uint16_t> ports_;
    std::vector<std::unique_ptr<Communicator>> comms_;
};

// Runs one collective on every rank and checks every rank's result.
void check_allreduce(Cluster &cl, DType dtype, ReduceOp op, size_t count, uint64_t salt,
                     bool in_place) {
    uint32_t n = cl.opts().ranks;
    uint32_t per = cl.comm(0).config().effective_elems_per_packet();
    SCOPED_TRACE(testing::Message() << to_string(dtype) << " " << to_string(op) << " count "
                                    << count << (in_place ? " in place" : ""));
    if (dtype == DType::Int32) {
        std::vector<std::vector<int32_t>> in(n), out(n);
        for (uint32_t r = 0; r < n; ++r) {
            in[r] = int_data(r, count, salt);
            out[r] = in_place ? in[r] : std::vector<int32_t>(count, 0x5a5a5a5a);
        }
        cl.parallel_ok([&](uint32_t r, Communicator &c) {
            if (in_place)
                c.allreduce(out[r].data(), out[r].data(), count, DType::Int32, op);
            else
                c.allreduce(in[r], out[r], op);
        });
        for (size_t i = 0; i < count; ++i) {
            uint32_t sum = 0;
            int32_t mx = std::numeric_limits<int32_t>::min(),
                    mn = std::numeric_limits<int32_t>::max();
            for (uint32_t r = 0; r < n; ++r) {
                sum += uint32_t(in[r][i]);
                mx = std::max(mx, in[r][i]);
                mn = std::min(mn, in[r][i]);
            }
            int32_t want = op == ReduceOp::Sum ? int32_t(sum) : op == ReduceOp::Max ? mx : mn;
            for (uint32_t r = 0; r < n; ++r)
                ASSERT_EQ(out[r][i], want) << "rank " << r << " element " << i;
        }
        return;
    }
    std::vector<std::vector<float>> in(n), out(n);
    for (uint32_t r = 0; r < n; ++r) {
        in[r] = float_data(r, count, salt);
        out[r] = in_place ? in[r] : std::vector<float>(count, -12345.0f);
    }
    cl.parallel_ok([&](uint32_t r, Communicator &c) {
        if (in_place)
            c.allreduce(out[r].data(), out[r].data(), count, DType::Float32, op);
        else
            c.allreduce(in[r], out[r], op);
    });
    for (size_t b = 0; b < count; b += per) {
        size_t len = std::min<size_t>(per, count - b);
        int8_t agreed = int8_t(quant::kMinExpField);
        for (uint32_t r = 0; r < n; ++r)
            agreed = std::max(agreed, quant::block_exponent(std::span(in[r]).subspan(b, len)));
        for (size_t i = b; i < b + len; ++i) {
            double want = op == ReduceOp::Sum ? 0 : op == ReduceOp::Max ? -INFINITY : INFINITY;
            for (uint32_t r = 0; r < n; ++r)
                want = op == ReduceOp::Sum   ? want + in[r][i]
                       : op == ReduceOp::Max ? std::max(want, double(in[r][i]))
                                             : std::min(want, double(in[r][i]));
            double bound = quant::result_bound(agreed, n, op, want);
            for (uint32_t r = 0; r < n; ++r)
                ASSERT_LE(std::fabs(double(out[r][i]) - want), bound)
                    << "rank " << r << " element " << i << " got " << out[r][i] << " want " << want;
        }
    }
}

void run_matrix(Cluster &cl, bool sum_only) {
    uint64_t salt = 1;
    for (DType dtype : {DType::Int32, DType::Float32})
        for (ReduceOp op : kOps) {
            if (sum_only && op != ReduceOp::Sum)
                continue;
            for (size_t count : kSizes) {
                check_allreduce(cl, dtype, op, count, salt, salt % 3 == 0);
                ++salt;
                if (testing::Test::HasFatalFailure())
                    return;
            }
        }
}

CommStats total_over_ranks(Cluster &cl) {
    CommStats t;
    for (uint32_t r = 0; r < cl.opts().ranks; ++r)
        t += cl.comm(r).total_stats();
    return t;
}

} // namespace

TEST(CommunicatorE2E, NativeLossless) {
    Cluster cl({});
    run_matrix(cl, false);
    CommStats t = total_over_ranks(cl);
    EXPECT_GT(t.results, 0u);
    EXPECT_EQ(t.malformed, 0u);
    EXPECT_EQ(cl.sw().counters().mismatch, 0u);
    EXPECT_EQ(cl.sw().counters().malformed, 0u);
}

TEST(CommunicatorE2E, NativeLossyDuplicatedLate) {
    ClusterOptions o;
    o.drop = 0.05;
    o.dup = 0.02;
    o.late = 0.02;
    Cluster cl(o);
    run_matrix(cl, false);
    CommStats t = total_over_ranks(cl);
    auto sc = cl.sw().counters();
    EXPECT_GT(sc.lost, 0u);
    EXPECT_GT(t.retransmissions, 0u);
    EXPECT_GT(t.duplicates + t.stale, 0u);
    EXPECT_EQ(sc.mismatch, 0u);
    RecordProperty("retransmissions", int(t.retransmissions));
}

TEST(CommunicatorE2E, SwitchmlLossy256) {
    ClusterOptions o;
    o.wire = Wire::SwitchML;
    o.drop = 0.05;
    o.dup = 0.02;
    Cluster cl(o);
    run_matrix(cl, true);
    EXPECT_GT(total_over_ranks(cl).retransmissions, 0u);
}

TEST(CommunicatorE2E, SwitchmlLossy64) {
    ClusterOptions o;
    o.wire = Wire::SwitchML;
    o.elems = 64;
    o.window = 16;
    o.drop = 0.05;
    o.late = 0.02;
    Cluster cl(o);
    run_matrix(cl, true);
}

TEST(CommunicatorE2E, SwitchmlRejectsMaxAndMin) {
    ClusterOptions o;
    o.wire = Wire::SwitchML;
    Cluster cl(o);
    std::vector<int32_t> v(10);
    EXPECT_THROW(cl.comm(0).allreduce(v, v, ReduceOp::Max), std::invalid_argument);
    EXPECT_THROW(cl.comm(0).allreduce(v, v, ReduceOp::Min), std::invalid_argument);
}

TEST(CommunicatorE2E, NextGenerationStartsCleanAfterCloseOrDestructor) {
    ClusterOptions o;
    o.drop = 0.03;
    Cluster cl(o);
    // 3 chunks on 8 slots: slots 0..2 used once, i.e. left in set 0 with
    // the ranks' bits set; without parking a new generation would be stale.
    check_allreduce(cl, DType::Int32, ReduceOp::Sum, 3 * 832, 1, false);
    cl.close_all();
    cl.open();
    check_allreduce(cl, DType::Float32, ReduceOp::Sum, 5 * 832, 2, false);
    check_allreduce(cl, DType::Int32, ReduceOp::Max, 1, 3, false);
    cl.destroy_all(); // parks from the destructors
    cl.open();
    check_allreduce(cl, DType::Int32, ReduceOp::Min, 100000, 4, false);
    EXPECT_EQ(cl.sw().counters().mismatch, 0u);
}

TEST(CommunicatorE2E, BarrierAndStats) {
    Cluster cl({});
    cl.parallel_ok([](uint32_t, Communicator &c) { c.barrier(); });
    check_allreduce(cl, DType::Int32, ReduceOp::Sum, 10000, 9, false);
    const CommStats &s = cl.comm(1).last_stats();
    EXPECT_EQ(s.results, (10000u + 831) / 832); // one per chunk
    EXPECT_GE(s.packets_sent, s.results);
    EXPECT_GT(s.bytes_sent, 10000u * 4);
    EXPECT_GT(s.seconds, 0);
}

// CommConfig::stop on the star engine: the allreduce that waits for a
// rank that never comes ends with CommInterrupted, not at its deadline.
TEST(CommunicatorE2E, StopEndsAWaitingAllreduceWithCommInterrupted) {
    std::atomic<bool> stop{false};
    ClusterOptions o;
    o.deadline = std::chrono::milliseconds(120000);
    o.stop = &stop;
    Cluster cl(o);
    std::thread setter([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        stop.store(true);
    });
    auto err = cl.parallel(
        [&](uint32_t, Communicator &c) {
            std::vector<int32_t> v(2000, 1);
            c.allreduce(v, v, ReduceOp::Sum);
        },
        3); // rank 3 never shows up
    setter.join();
    for (uint32_t r = 0; r < 3; ++r) {
        ASSERT_TRUE(err[r]) << "rank " << r;
        try {
            std::rethrow_exception(err[r]);
        } catch (const CommInterrupted &e) {
            EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(r) + " job 7 interrupted"),
                      std::string::npos)
                << e.what();
        } catch (const std::exception &e) {
            FAIL() << "rank " << r << ": not CommInterrupted: " << e.what();
        }
    }
}

TEST(CommunicatorE2E, StallNamesRankJobSlotAndChunk) {
    ClusterOptions o;
    o.deadline = std::chrono::milliseconds(300);
    Cluster cl(o);
    std::vector<std::string> msgs(3);
    auto err = cl.parallel(
        [&](uint32_t r, Communicator &c) {
            std::vector<int32_t> v(2000, 1);
            try {
                c.allreduce(v, v, ReduceOp::Sum);
            } catch (const CommTimeout &e) {
                msgs[r] = e.what();
                EXPECT_EQ(e.rank, r);
                EXPECT_EQ(e.job, kJob);
                EXPECT_EQ(e.slot, 0u);
                EXPECT_EQ(e.chunk, 0u);
                throw;
            }
        },
        3); // rank 3 never shows up
    for (uint32_t r = 0; r < 3; ++r) {
        ASSERT_TRUE(err[r]) << "rank " << r << " did not time out";
        EXPECT_NE(msgs[r].find("rank " + std::to_string(r) + " of 4"), std::string::npos)
            << msgs[r];
        EXPECT_NE(msgs[r].find("job 7"), std::string::npos) << msgs[r];
        EXPECT_NE(msgs[r].find("slot 0 set 0, chunk 0"), std::string::npos) << msgs[r];
    }
    std::vector<int32_t> v(1);
    EXPECT_THROW(cl.comm(0).allreduce(v, v, ReduceOp::Sum), std::logic_error);
}

TEST(CommunicatorE2E, MaxRetriesGivesUp) {
    ClusterOptions o;
    o.ranks = 2;
    o.max_retries = 2;
    Cluster cl(o);
    std::vector<int32_t> v(5, 1);
    try {
        cl.comm(0).allreduce(v, v, ReduceOp::Sum); // rank 1 never joins
        FAIL() << "expected CommTimeout";
    } catch (const CommTimeout &e) {
        EXPECT_NE(std::string(e.what()).find("gave up after 2 retransmissions"), std::string::npos)
            << e.what();
    }
}

// A rank off the CPU for longer than its timeout wakes with the results of
// its whole window waiting in its socket: the timers must not resend the
// slots whose results are queued behind the first receive (rx_backlog.h).
// The transport plays the scheduler (pause_gate.h).
class PausedTransport final : public Transport {
  public:
    explicit PausedTransport(std::unique_ptr<Transport> inner) : inner_(std::move(inner)) {}
    size_t send_batch(std::span<const std::span<const std::byte>> pkts) override {
        return inner_->send_batch(pkts);
    }
    size_t recv_batch(std::span<const std::span<std::byte>> bufs,
                      std::span<size_t> sizes) override {
        return gate_.paused() ? 0 : inner_->recv_batch(bufs, sizes);
    }
    size_t recv_views(std::span<std::span<const std::byte>> out, size_t max_len) override {
        return gate_.paused() ? 0 : inner_->recv_views(out, max_len);
    }
    void wait(std::chrono::nanoseconds timeout, bool want_send) override {
        inner_->wait(timeout, want_send);
        gate_.hold();
    }
    std::string describe() const override { return "paused " + inner_->describe(); }
    PauseGate &gate() { return gate_; }

  private:
    std::unique_ptr<Transport> inner_;
    PauseGate gate_;
};

TEST(CommunicatorE2E, TimersWaitUntilTheQueuedResultsAreRead) {
    ClusterOptions o;
    o.ranks = 1;
    o.window = 128; // two receives' worth of results (batch 64)
    o.elems = 16;
    Cluster cl(o);
    CommConfig c = cl.config(0);
    UdpTransportConfig t;
    t.local_ip = t.remote_ip = "127.0.0.1";
    t.local_port = c.local_port;
    t.remote_port = c.switch_port;
    t.batch = c.batch;
    cl.close_all(); // the rank's port is ours now
    auto paused = std::make_unique<PausedTransport>(make_udp_transport(t));
    PausedTransport *link = paused.get();
    link->gate().pause();
    Communicator comm(c, std::move(paused));
    std::vector<int32_t> in = int_data(0, size_t(o.window) * o.elems, 3), out(in.size(), 0);
    std::exception_ptr err;
    std::thread rank([&] {
        try {
            comm.allreduce(in, out, ReduceOp::Sum);
        } catch (...) {
            err = std::current_exception();
        }
    });
    // Every slot's result is back in the socket long before this ends; ten
    // times the 20 ms timeout.
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    link->gate().resume();
    rank.join();
    expect_no_errors({err});
    EXPECT_EQ(out, in);
    CommStats s = comm.total_stats();
    EXPECT_EQ(s.timeouts, 0u) << "every result was queued";
    EXPECT_EQ(s.retransmissions, 0u);
    EXPECT_EQ(s.results, uint64_t(o.window));
}

TEST(CommunicatorE2E, RejectsNonFiniteFloatBeforeSending) {
    ClusterOptions o;
    o.ranks = 1;
    Cluster cl(o);
    std::vector<float> v(3000, 1.0f), out(3000);
    v[2500] = std::numeric_limits<float>::quiet_NaN();
    try {
        cl.comm(0).allreduce(v, out, ReduceOp::Sum);
        FAIL() << "expected invalid_argument";
    } catch (const std::invalid_argument &e) {
        EXPECT_NE(std::string(e.what()).find("element 2500 is NaN"), std::string::npos) << e.what();
    }
    v[2500] = std::numeric_limits<float>::infinity();
    EXPECT_THROW(cl.comm(0).allreduce(v, out, ReduceOp::Max), std::invalid_argument);
    EXPECT_EQ(cl.sw().counters().rx, 0u);
    // Still usable: nothing was sent.
    v[2500] = 2.0f;
    cl.comm(0).allreduce(v, out, ReduceOp::Sum);
    EXPECT_FLOAT_EQ(out[2500], 2.0f);
}

TEST(CommunicatorE2E, RejectsBadArguments) {
    ClusterOptions o;
    o.ranks = 1;
    Cluster cl(o);
    std::vector<int32_t> a(10), b(9);
    EXPECT_THROW(cl.comm(0).allreduce(a, b, ReduceOp::Sum), std::invalid_argument);
    EXPECT_THROW(cl.comm(0).allreduce(a.data(), a.data() + 1, 5, DType::Int32, ReduceOp::Sum),
                 std::invalid_argument); // overlapping, not in place
    CommConfig c = cl.config(0);
    c.rank = 1;
    EXPECT_THROW(c.validate(), std::invalid_argument);
    c = cl.config(0);
    c.elems_per_packet = 100;
    EXPECT_THROW(c.validate(), std::invalid_argument);
    c.wire = Wire::SwitchML;
    EXPECT_THROW(c.validate(), std::invalid_argument);
    c.elems_per_packet = 64;
    EXPECT_NO_THROW(c.validate());
}

// Star jobs: reduce is an allreduce whose result only the root keeps,
// broadcast an int32 sum of the root's bits and everyone else's zeros.
TEST(CommunicatorE2E, ReduceAndBroadcastOnStar) {
    for (Wire wire : {Wire::Native, Wire::SwitchML}) {
        SCOPED_TRACE(to_string(wire));
        ClusterOptions o;
        o.wire = wire;
        o.drop = 0.03;
        Cluster cl(o);
        const uint32_t n = cl.opts().ranks;
        const size_t count = 5000;
        const int32_t marker = 0x5a5a5a5a;
        for (uint32_t root : {0u, 2u}) {
            std::vector<std::vector<int32_t>> in(n), out(n, std::vector<int32_t>(count, marker));
            for (uint32_t r = 0; r < n; ++r)
                in[r] = int_data(r, count, 40 + root);
            cl.parallel_ok([&](uint32_t r, Communicator &c) {
                c.reduce(in[r].data(), r == 3 ? nullptr : out[r].data(), count, DType::Int32,
                         ReduceOp::Sum, root);
            });
            for (size_t i = 0; i < count; ++i) {
                uint32_t sum = 0;
                for (uint32_t r = 0; r < n; ++r)
                    sum += uint32_t(in[r][i]);
                ASSERT_EQ(out[root][i], int32_t(sum)) << "root " << root << " element " << i;
            }
            for (uint32_t r = 0; r < n; ++r) {
                if (r != root) {
                    ASSERT_EQ(out[r], std::vector<int32_t>(count, marker)) << "rank " << r;
                }
            }

            // Broadcast float bits, NaN and infinity patterns included.
            std::vector<std::vector<float>> buf(n, std::vector<float>(count));
            for (uint32_t r = 0; r < n; ++r) {
                auto bits = int_data(r + 10, count, 50 + root);
                std::memcpy(buf[r].data(), bits.data(), 4 * count);
            }
            auto want = buf[root];
            cl.parallel_ok([&](uint32_t r, Communicator &c) {
                c.broadcast(buf[r].data(), count, DType::Float32, root);
            });
            for (uint32_t r = 0; r < n; ++r)
                ASSERT_EQ(std::memcmp(buf[r].data(), want.data(), 4 * count), 0) << "rank " << r;
        }
        if (wire == Wire::Native) {
            // Float max through reduce: the root within the bound.
            std::vector<std::vector<float>> in(n);
            std::vector<float> out(count);
            for (uint32_t r = 0; r < n; ++r)
                in[r] = float_data(r, count, 77);
            cl.parallel_ok([&](uint32_t r, Communicator &c) {
                c.reduce(in[r].data(), r == 1 ? out.data() : nullptr, count, DType::Float32,
                         ReduceOp::Max, 1);
            });
            uint32_t per = cl.comm(0).config().effective_elems_per_packet();
            for (size_t i = 0; i < count; ++i) {
                size_t b = i / per * per, len = std::min<size_t>(per, count - b);
                int8_t agreed = int8_t(quant::kMinExpField);
                float want = in[0][i];
                for (uint32_t r = 0; r < n; ++r) {
                    agreed =
                        std::max(agreed, quant::block_exponent(std::span(in[r]).subspan(b, len)));
                    want = std::max(want, in[r][i]);
                }
                ASSERT_LE(std::fabs(double(out[i]) - want),
                          quant::result_bound(agreed, n, ReduceOp::Max, want))
                    << i;
            }
        }
        std::vector<int32_t> v(4);
        EXPECT_THROW(cl.comm(0).reduce(v.data(), v.data(), 4, DType::Int32, ReduceOp::Sum, n),
                     std::invalid_argument);
        EXPECT_THROW(cl.comm(0).broadcast(v.data(), 4, DType::Int32, n), std::invalid_argument);
        EXPECT_EQ(cl.sw().counters().mismatch, 0u);
    }
}
