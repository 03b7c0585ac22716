// SPDX-License-Identifier: BSD-2-Clause
// The C API end to end: 4 ranks on their own threads, one incxdp_comm_t
// each, against the userspace reference switch (ref_switch.h). Results are
// checked value by value; the timeout and interrupt paths end in their codes.
#include "ref_switch.h"
#include "test_data.h"

#include <incxdp/incxdp.h>
#include <incxdp/quantize.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <thread>
#include <vector>

using namespace incxdp;
using namespace incxdp::test;

namespace {

constexpr uint32_t kJob = 7;
constexpr uint32_t kWindow = 8;
constexpr uint32_t kElems = 64; // float32 blocks: one exponent per 64 elements

static_assert(noexcept(incxdp_allreduce(nullptr, nullptr, nullptr, 0, INCXDP_INT32, INCXDP_SUM)),
              "no exception crosses the C boundary");

class CCluster {
  public:
    // `ranks` workers known to the switch; the first `open` get a communicator.
    CCluster(uint32_t ranks, uint32_t open, uint32_t deadline_ms) : ranks_(ranks) {
        RefSwitchConfig sc;
        sc.job = kJob;
        sc.slots = kWindow;
        for (uint32_t r = 0; r < ranks; ++r)
            sc.worker_ports.push_back(free_udp_port());
        sw_ = std::make_unique<RefSwitch>(sc);
        for (uint32_t r = 0; r < open; ++r) {
            incxdp_config_t c;
            incxdp_config_init(&c);
            c.job = kJob;
            c.rank = r;
            c.world_size = ranks;
            c.switch_ip = "127.0.0.1";
            c.switch_port = sw_->port();
            c.local_ip = "127.0.0.1";
            c.local_port = sc.worker_ports[r];
            c.window = kWindow;
            c.elems_per_packet = kElems;
            c.deadline_ms = deadline_ms;
            incxdp_comm_t *comm = nullptr;
            EXPECT_EQ(incxdp_comm_create(&c, &comm), INCXDP_OK) << incxdp_last_error(nullptr);
            comms_.push_back(comm);
        }
    }
    ~CCluster() {
        // Collective close, then free: a comm that failed stays unusable.
        parallel([](uint32_t, incxdp_comm_t *c) { return incxdp_comm_close(c); });
        for (incxdp_comm_t *c : comms_)
            incxdp_comm_destroy(c);
    }

    // f on every open rank in parallel; each returns its status.
    std::vector<incxdp_status_t>
    parallel(const std::function<incxdp_status_t(uint32_t, incxdp_comm_t *)> &f) {
        std::vector<incxdp_status_t> st(comms_.size(), INCXDP_OK);
        std::vector<std::thread> t;
        for (uint32_t r = 0; r < comms_.size(); ++r)
            t.emplace_back([&, r] { st[r] = f(r, comms_[r]); });
        for (auto &th : t)
            th.join();
        return st;
    }

    void parallel_ok(const std::function<incxdp_status_t(uint32_t, incxdp_comm_t *)> &f) {
        auto st = parallel(f);
        for (uint32_t r = 0; r < st.size(); ++r)
            EXPECT_EQ(st[r], INCXDP_OK) << "rank " << r << ": " << incxdp_last_error(comms_[r]);
    }

    uint32_t ranks() const { return ranks_; }
    incxdp_comm_t *comm(uint32_t r) { return comms_[r]; }
    RefSwitch &sw() { return *sw_; }

  private:
    uint32_t ranks_;
    std::unique_ptr<RefSwitch> sw_;
    std::vector<incxdp_comm_t *> comms_;
};

int32_t int_want(const std::vector<std::vector<int32_t>> &in, size_t i, incxdp_op_t op) {
    uint32_t sum = 0;
    int32_t mx = std::numeric_limits<int32_t>::min(), mn = std::numeric_limits<int32_t>::max();
    for (const auto &v : in) {
        sum += uint32_t(v[i]);
        mx = std::max(mx, v[i]);
        mn = std::min(mn, v[i]);
    }
    return op == INCXDP_SUM ? int32_t(sum) : op == INCXDP_MAX ? mx : mn;
}

TEST(CApiE2E, Int32AllReduceEveryOp) {
    CCluster cl(4, 4, 20000);
    const size_t n = 1000;
    uint64_t salt = 1;
    for (incxdp_op_t op : {INCXDP_SUM, INCXDP_MAX, INCXDP_MIN}) {
        SCOPED_TRACE(testing::Message() << "op " << int(op));
        std::vector<std::vector<int32_t>> in(4), out(4, std::vector<int32_t>(n, 0x5a5a5a5a));
        for (uint32_t r = 0; r < 4; ++r)
            in[r] = int_data(r, n, salt);
        ++salt;
        cl.parallel_ok([&](uint32_t r, incxdp_comm_t *c) {
            return incxdp_allreduce(c, in[r].data(), out[r].data(), n, INCXDP_INT32, op);
        });
        for (size_t i = 0; i < n; ++i)
            for (uint32_t r = 0; r < 4; ++r)
                ASSERT_EQ(out[r][i], int_want(in, i, op)) << "rank " << r << " element " << i;
    }
    incxdp_stats_t last, total;
    ASSERT_EQ(incxdp_comm_stats(cl.comm(0), INCXDP_STATS_LAST, &last), INCXDP_OK);
    ASSERT_EQ(incxdp_comm_stats(cl.comm(0), INCXDP_STATS_TOTAL, &total), INCXDP_OK);
    // 1000 elements in packets of 64: 16 results per call.
    EXPECT_EQ(last.results, 16u);
    EXPECT_GE(last.packets_sent, 16u);
    EXPECT_EQ(total.results, 3 * 16u);
    EXPECT_GE(total.bytes_sent, 3 * n * 4);
    EXPECT_GT(total.seconds, 0.0);
    EXPECT_EQ(total.malformed, 0u);
}

TEST(CApiE2E, Float32AllReduceInPlaceWithinBound) {
    CCluster cl(4, 4, 20000);
    const size_t n = 777;
    for (incxdp_op_t op : {INCXDP_SUM, INCXDP_MAX, INCXDP_MIN}) {
        SCOPED_TRACE(testing::Message() << "op " << int(op));
        std::vector<std::vector<float>> in(4), out(4);
        for (uint32_t r = 0; r < 4; ++r)
            out[r] = in[r] = float_data(r, n, 40 + op);
        cl.parallel_ok([&](uint32_t, incxdp_comm_t *c) {
            uint32_t r = 99;
            if (incxdp_comm_rank(c, &r) != INCXDP_OK)
                return INCXDP_EFAILED;
            return incxdp_allreduce(c, out[r].data(), out[r].data(), n, INCXDP_FLOAT32, op);
        });
        ReduceOp cop = op == INCXDP_SUM   ? ReduceOp::Sum
                       : op == INCXDP_MAX ? ReduceOp::Max
                                          : ReduceOp::Min;
        for (size_t b = 0; b < n; b += kElems) {
            size_t len = std::min<size_t>(kElems, n - b);
            int8_t agreed = int8_t(quant::kMinExpField);
            for (uint32_t r = 0; r < 4; ++r)
                agreed = std::max(agreed, quant::block_exponent(std::span(in[r]).subspan(b, len)));
            for (size_t i = b; i < b + len; ++i) {
                double want = op == INCXDP_SUM ? 0 : op == INCXDP_MAX ? -INFINITY : INFINITY;
                for (uint32_t r = 0; r < 4; ++r)
                    want = op == INCXDP_SUM   ? want + in[r][i]
                           : op == INCXDP_MAX ? std::max(want, double(in[r][i]))
                                              : std::min(want, double(in[r][i]));
                double bound = quant::result_bound(agreed, 4, cop, want);
                for (uint32_t r = 0; r < 4; ++r)
                    ASSERT_LE(std::fabs(double(out[r][i]) - want), bound)
                        << "rank " << r << " element " << i << " got " << out[r][i];
            }
        }
    }
}

TEST(CApiE2E, ReduceBroadcastBarrier) {
    CCluster cl(4, 4, 20000);
    const size_t n = 300;
    const uint32_t root = 2;
    std::vector<std::vector<int32_t>> in(4), out(4, std::vector<int32_t>(n, 0x5a5a5a5a));
    for (uint32_t r = 0; r < 4; ++r)
        in[r] = int_data(r, n, 77);
    // Non-roots pass recv NULL (rank 1) or a buffer that must stay untouched.
    cl.parallel_ok([&](uint32_t r, incxdp_comm_t *c) {
        return incxdp_reduce(c, in[r].data(), r == 1 ? nullptr : out[r].data(), n, INCXDP_INT32,
                             INCXDP_SUM, root);
    });
    for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[root][i], int_want(in, i, INCXDP_SUM)) << "element " << i;
        ASSERT_EQ(out[0][i], 0x5a5a5a5a) << "rank 0 element " << i;
        ASSERT_EQ(out[3][i], 0x5a5a5a5a) << "rank 3 element " << i;
    }

    // Broadcast is bit for bit, NaN patterns included.
    std::vector<std::vector<float>> buf(4);
    for (uint32_t r = 0; r < 4; ++r)
        buf[r] = float_data(r, n, 5);
    buf[1][17] = std::numeric_limits<float>::quiet_NaN();
    const std::vector<float> want = buf[1];
    cl.parallel_ok([&](uint32_t r, incxdp_comm_t *c) {
        return incxdp_broadcast(c, buf[r].data(), n, INCXDP_FLOAT32, 1);
    });
    for (uint32_t r = 0; r < 4; ++r)
        ASSERT_EQ(std::memcmp(buf[r].data(), want.data(), n * 4), 0) << "rank " << r;

    cl.parallel_ok([](uint32_t, incxdp_comm_t *c) { return incxdp_barrier(c); });
    incxdp_stats_t last;
    ASSERT_EQ(incxdp_comm_stats(cl.comm(3), INCXDP_STATS_LAST, &last), INCXDP_OK);
    EXPECT_EQ(last.results, 1u); // a barrier is one one-element step
    EXPECT_EQ(cl.sw().counters().mismatch, 0u);
}

// The C entry points of AllGather, ReduceScatter and AVG reach the
// Communicator's (whose values collectives_test.cpp checks in depth).
TEST(CApiE2E, AllGatherReduceScatterAvg) {
    CCluster cl(4, 4, 20000);
    const size_t n = 100;
    std::vector<std::vector<int32_t>> in(4), gathered(4, std::vector<int32_t>(4 * n)),
        scattered(4, std::vector<int32_t>(n / 4));
    std::vector<std::vector<float>> fin(4), favg(4, std::vector<float>(n)),
        fsum(4, std::vector<float>(n));
    for (uint32_t r = 0; r < 4; ++r) {
        in[r] = int_data(r, n, 91);
        fin[r] = float_data(r, n, 92);
    }
    cl.parallel_ok([&](uint32_t r, incxdp_comm_t *c) {
        incxdp_status_t st = incxdp_allgather(c, in[r].data(), gathered[r].data(), n, INCXDP_INT32);
        if (st == INCXDP_OK)
            st = incxdp_reduce_scatter(c, in[r].data(), scattered[r].data(), n / 4, INCXDP_INT32,
                                       INCXDP_MIN);
        if (st == INCXDP_OK)
            st = incxdp_allreduce(c, fin[r].data(), fsum[r].data(), n, INCXDP_FLOAT32, INCXDP_SUM);
        if (st == INCXDP_OK)
            st = incxdp_allreduce(c, fin[r].data(), favg[r].data(), n, INCXDP_FLOAT32, INCXDP_AVG);
        return st;
    });
    for (uint32_t r = 0; r < 4; ++r) {
        for (uint32_t k = 0; k < 4; ++k)
            ASSERT_EQ(std::memcmp(gathered[r].data() + k * n, in[k].data(), 4 * n), 0)
                << "rank " << r << " block " << k;
        for (size_t i = 0; i < n / 4; ++i)
            ASSERT_EQ(scattered[r][i], int_want(in, r * (n / 4) + i, INCXDP_MIN))
                << "rank " << r << " element " << i;
        for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(favg[r][i], fsum[r][i] / 4.0f) << "rank " << r << " element " << i;
    }
}

// Rank 1 never comes: rank 0's allreduce ends at the deadline, and the
// communicator refuses further collectives.
TEST(CApiE2E, MissingRankTimesOut) {
    CCluster cl(2, 1, 300);
    std::vector<int32_t> a(100, 1);
    incxdp_comm_t *c = cl.comm(0);
    EXPECT_EQ(incxdp_allreduce(c, a.data(), a.data(), a.size(), INCXDP_INT32, INCXDP_SUM),
              INCXDP_ETIMEDOUT);
    EXPECT_NE(std::strstr(incxdp_last_error(c), "timed out"), nullptr) << incxdp_last_error(c);
    EXPECT_EQ(incxdp_barrier(c), INCXDP_ESTATE);
    EXPECT_NE(std::strstr(incxdp_last_error(c), "unusable"), nullptr) << incxdp_last_error(c);
    EXPECT_EQ(incxdp_comm_close(c), INCXDP_ESTATE);
}

// The same missing rank, with a deadline far away: incxdp_comm_interrupt()
// from another thread ends the wait.
TEST(CApiE2E, InterruptEndsTheWait) {
    CCluster cl(2, 1, 600000);
    std::vector<int32_t> a(100, 1);
    incxdp_comm_t *c = cl.comm(0);
    std::thread stopper([c] {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        incxdp_comm_interrupt(c);
    });
    incxdp_status_t st =
        incxdp_allreduce(c, a.data(), a.data(), a.size(), INCXDP_INT32, INCXDP_SUM);
    stopper.join();
    EXPECT_EQ(st, INCXDP_EINTR) << incxdp_last_error(c);
    EXPECT_NE(std::strstr(incxdp_last_error(c), "interrupted"), nullptr) << incxdp_last_error(c);
    EXPECT_EQ(incxdp_allreduce(c, a.data(), a.data(), a.size(), INCXDP_INT32, INCXDP_SUM),
              INCXDP_ESTATE);
}

} // namespace
