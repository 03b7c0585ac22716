// SPDX-License-Identifier: BSD-2-Clause
// AllGather, ReduceScatter and AVG through both engine backends, in one
// process: 4 ranks on the star's reference switch (ref_switch.h) and 4 on
// the RoCE tree's model (roce_soft_switch.h). Also: what is refused (int32
// AVG, SwitchML MAX) and the Auto transport's fallback notice.
#include "parallel_ranks.h"
#include "ref_switch.h"
#include "roce_soft_switch.h"
#include "roce_test_config.h"
#include "test_data.h"

#include <incxdp/communicator.h>

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace incxdp;
using namespace incxdp::test;

namespace {

constexpr uint32_t kRanks = 4;
constexpr uint32_t kStarJob = 7;

// The ranks' communicators on the star (reference switch) or a RoCE tree.
class Ranks {
  public:
    static std::unique_ptr<Ranks> star(Wire wire = Wire::Native) {
        auto r = std::unique_ptr<Ranks>(new Ranks);
        RefSwitchConfig sc;
        sc.wire = wire;
        sc.job = kStarJob;
        sc.slots = 8;
        for (uint32_t i = 0; i < kRanks; ++i)
            sc.worker_ports.push_back(free_udp_port());
        r->sw_ = std::make_unique<RefSwitch>(sc);
        for (uint32_t i = 0; i < kRanks; ++i)
            r->comms_.push_back(std::make_unique<Communicator>(
                star_config(i, sc.worker_ports[i], r->sw_->port(), wire)));
        return r;
    }

    static std::unique_ptr<Ranks> roce() {
        auto r = std::unique_ptr<Ranks>(new Ranks);
        RoceOptions o;
        o.sw.ranks = kRanks;
        r->net_ = std::make_unique<SoftRoceNet>(o.sw);
        for (uint32_t i = 0; i < kRanks; ++i)
            r->comms_.push_back(std::make_unique<Communicator>(roce_config(r->net_->conn(i), o, i),
                                                               r->net_->transport(i)));
        return r;
    }

    static CommConfig star_config(uint32_t rank, uint16_t port, uint16_t switch_port, Wire wire) {
        CommConfig c;
        c.rank = rank;
        c.world_size = kRanks;
        c.job = kStarJob;
        c.switch_ip = c.local_ip = "127.0.0.1";
        c.switch_port = switch_port;
        c.local_port = port;
        c.window = 8;
        c.wire = wire;
        c.deadline = std::chrono::milliseconds(20000);
        return c;
    }

    ~Ranks() {
        // close() is collective on the star: every rank on its own thread.
        run_ranks(comms_, kRanks, [](uint32_t, Communicator &c) { c.close(); });
    }

    void each(const RankFn &f) { expect_no_errors(run_ranks(comms_, kRanks, f)); }
    Communicator &comm(uint32_t r) { return *comms_[r]; }

  private:
    Ranks() = default;
    std::unique_ptr<RefSwitch> sw_;
    std::unique_ptr<SoftRoceNet> net_; // before comms_: their transports point into it
    std::vector<std::unique_ptr<Communicator>> comms_;
};

std::vector<std::vector<int32_t>> int_inputs(size_t n, uint64_t salt) {
    std::vector<std::vector<int32_t>> v;
    for (uint32_t r = 0; r < kRanks; ++r)
        v.push_back(int_data(r, n, salt));
    return v;
}

std::vector<std::vector<float>> float_inputs(size_t n, uint64_t salt) {
    std::vector<std::vector<float>> v;
    for (uint32_t r = 0; r < kRanks; ++r)
        v.push_back(float_data(r, n, salt));
    return v;
}

// Every rank's block, bit for bit, for both dtypes; out of place and in place.
void check_allgather(Ranks &rk, size_t count) {
    SCOPED_TRACE(testing::Message() << "allgather count " << count);
    auto ints = int_inputs(count, 11);
    auto floats = float_inputs(count, 12);
    std::vector<std::vector<int32_t>> gi(kRanks, std::vector<int32_t>(kRanks * count, -1));
    std::vector<std::vector<float>> gf(kRanks, std::vector<float>(kRanks * count, -1.0f));
    rk.each([&](uint32_t r, Communicator &c) {
        c.allgather(ints[r].data(), gi[r].data(), count, DType::Int32);
        // in place: the rank's own block already sits in recv
        std::memcpy(gf[r].data() + r * count, floats[r].data(), 4 * count);
        c.allgather(gf[r].data() + r * count, gf[r].data(), count, DType::Float32);
    });
    for (uint32_t r = 0; r < kRanks; ++r)
        for (uint32_t k = 0; k < kRanks; ++k) {
            ASSERT_EQ(0, std::memcmp(gi[r].data() + k * count, ints[k].data(), 4 * count))
                << "rank " << r << " block " << k << " (int32)";
            ASSERT_EQ(0, std::memcmp(gf[r].data() + k * count, floats[k].data(), 4 * count))
                << "rank " << r << " block " << k << " (float32)";
        }
}

// Rank r's result is block r of the allreduce of the same data, bit for bit
// (the same chunks, so the same float32 exponents); int32 is checked
// against a local reduction too.
void check_reduce_scatter(Ranks &rk, size_t count, ReduceOp op) {
    SCOPED_TRACE(testing::Message() << "reduce_scatter " << to_string(op) << " count " << count);
    const size_t n = kRanks * count;
    auto ints = int_inputs(n, 21);
    auto floats = float_inputs(n, 22);
    std::vector<std::vector<int32_t>> si(kRanks, std::vector<int32_t>(count));
    std::vector<std::vector<float>> sf(kRanks, std::vector<float>(count)), af(kRanks);
    rk.each([&](uint32_t r, Communicator &c) {
        c.reduce_scatter(ints[r].data(), si[r].data(), count, DType::Int32, op);
        c.reduce_scatter(floats[r].data(), sf[r].data(), count, DType::Float32, op);
        af[r].resize(n);
        c.allreduce(floats[r].data(), af[r].data(), n, DType::Float32, op);
    });
    for (uint32_t r = 0; r < kRanks; ++r)
        for (size_t i = 0; i < count; ++i) {
            size_t g = r * count + i;
            uint32_t sum = 0;
            int32_t mx = ints[0][g], mn = ints[0][g];
            for (uint32_t k = 0; k < kRanks; ++k) {
                sum += uint32_t(ints[k][g]);
                mx = std::max(mx, ints[k][g]);
                mn = std::min(mn, ints[k][g]);
            }
            int32_t want = op == ReduceOp::Sum ? int32_t(sum) : op == ReduceOp::Max ? mx : mn;
            ASSERT_EQ(si[r][i], want) << "rank " << r << " element " << i;
            ASSERT_EQ(std::bit_cast<uint32_t>(sf[r][i]), std::bit_cast<uint32_t>(af[r][g]))
                << "rank " << r << " element " << i << ": " << sf[r][i] << " vs " << af[r][g];
        }
}

// float32 AVG = the SUM's result divided by the world size, exactly; for
// allreduce, reduce (root only) and reduce_scatter.
void check_avg(Ranks &rk, size_t count) {
    SCOPED_TRACE(testing::Message() << "avg count " << count);
    const size_t n = kRanks * count;
    auto in = float_inputs(n, 31);
    std::vector<std::vector<float>> sum(kRanks, std::vector<float>(n)),
        avg(kRanks, std::vector<float>(n)), red(kRanks, std::vector<float>(n, -7.0f)),
        rs(kRanks, std::vector<float>(count));
    const uint32_t root = 2;
    rk.each([&](uint32_t r, Communicator &c) {
        c.allreduce(in[r].data(), sum[r].data(), n, DType::Float32, ReduceOp::Sum);
        c.allreduce(in[r].data(), avg[r].data(), n, DType::Float32, ReduceOp::Avg);
        c.reduce(in[r].data(), red[r].data(), n, DType::Float32, ReduceOp::Avg, root);
        c.reduce_scatter(in[r].data(), rs[r].data(), count, DType::Float32, ReduceOp::Avg);
    });
    for (uint32_t r = 0; r < kRanks; ++r)
        for (size_t i = 0; i < n; ++i) {
            float want = sum[r][i] / float(kRanks);
            ASSERT_EQ(avg[r][i], want) << "rank " << r << " element " << i;
            ASSERT_EQ(red[r][i], r == root ? want : -7.0f) << "rank " << r << " element " << i;
            if (i / count == r) {
                ASSERT_EQ(rs[r][i % count], want) << "rank " << r << " element " << i;
            }
        }
}

// int32 AVG is refused before anything is sent: the communicator goes on.
void check_int_avg_refused(Ranks &rk) {
    rk.each([](uint32_t r, Communicator &c) {
        std::vector<int32_t> v(kRanks * 8, int32_t(r)), out(kRanks * 8);
        EXPECT_THROW(c.allreduce(v.data(), out.data(), v.size(), DType::Int32, ReduceOp::Avg),
                     std::invalid_argument);
        EXPECT_THROW(c.reduce_scatter(v.data(), out.data(), 8, DType::Int32, ReduceOp::Avg),
                     std::invalid_argument);
        try {
            c.reduce(v.data(), out.data(), v.size(), DType::Int32, ReduceOp::Avg, 0);
            ADD_FAILURE() << "int32 avg must be refused";
        } catch (const std::invalid_argument &e) {
            EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
        }
        c.allreduce(v.data(), out.data(), v.size(), DType::Int32, ReduceOp::Sum);
        EXPECT_EQ(out[0], 0 + 1 + 2 + 3);
    });
}

} // namespace

TEST(Collectives, StarAllGather) {
    auto rk = Ranks::star();
    for (size_t count : {1, 15, 833, 5000})
        check_allgather(*rk, count);
}

TEST(Collectives, StarReduceScatter) {
    auto rk = Ranks::star();
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
        for (size_t count : {1, 17, 1000})
            check_reduce_scatter(*rk, count, op);
}

TEST(Collectives, StarAvgAndIntAvgRefused) {
    auto rk = Ranks::star();
    check_avg(*rk, 700);
    check_int_avg_refused(*rk);
}

TEST(Collectives, SwitchmlRefusesMaxButAveragesBySumming) {
    auto rk = Ranks::star(Wire::SwitchML);
    rk->each([](uint32_t, Communicator &c) {
        std::vector<float> v(kRanks * 64, 1.0f), out(64);
        try {
            c.reduce_scatter(v.data(), out.data(), 64, DType::Float32, ReduceOp::Max);
            ADD_FAILURE() << "max on the SwitchML wire must be refused";
        } catch (const std::invalid_argument &e) {
            EXPECT_NE(std::string(e.what()).find("SwitchML"), std::string::npos) << e.what();
        }
    });
    check_avg(*rk, 300);
    check_allgather(*rk, 100);
}

TEST(Collectives, RoceTreeAllGather) {
    auto rk = Ranks::roce();
    for (size_t count : {1, 15, 600, 3000})
        check_allgather(*rk, count);
}

TEST(Collectives, RoceTreeReduceScatter) {
    auto rk = Ranks::roce();
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
        for (size_t count : {1, 17, 1000})
            check_reduce_scatter(*rk, count, op);
}

TEST(Collectives, RoceTreeAvgAndIntAvgRefused) {
    auto rk = Ranks::roce();
    check_avg(*rk, 700);
    check_int_avg_refused(*rk);
}

// Auto on an interface AF_XDP cannot use: one line on stderr naming the
// interface and why, then the UDP socket, and the results are right.
TEST(Collectives, AutoFallsBackToUdpWithOneNotice) {
    RefSwitchConfig sc;
    sc.job = kStarJob;
    sc.slots = 8;
    for (uint32_t i = 0; i < 2; ++i)
        sc.worker_ports.push_back(free_udp_port());
    RefSwitch sw(sc);
    std::vector<std::unique_ptr<Communicator>> comms;
    const std::string iface = "incxdp-none" + std::to_string(getpid() % 10000);
    testing::internal::CaptureStderr();
    for (uint32_t r = 0; r < 2; ++r) {
        CommConfig c = Ranks::star_config(r, sc.worker_ports[r], sw.port(), Wire::Native);
        c.world_size = 2;
        ASSERT_EQ(c.carrier, Carrier::Auto); // the default
        c.xdp_iface = r == 0 ? iface : "";           // rank 1: loopback, the socket without a word
        comms.push_back(std::make_unique<Communicator>(c));
    }
    std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
    EXPECT_NE(err.find("incxdp: rank 0: AF_XDP on " + iface + " not available ("),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("); using the UDP socket\n"), std::string::npos) << err;
    for (auto &c : comms)
        EXPECT_EQ(c->config().carrier, Carrier::Socket);
    std::vector<std::vector<int32_t>> out(2, std::vector<int32_t>(1000));
    expect_no_errors(run_ranks(comms, 2, [&](uint32_t r, Communicator &c) {
        std::vector<int32_t> v(1000, int32_t(r + 1));
        c.allreduce(v.data(), out[r].data(), v.size(), DType::Int32, ReduceOp::Sum);
        c.close();
    }));
    for (uint32_t r = 0; r < 2; ++r)
        EXPECT_EQ(out[r], std::vector<int32_t>(1000, 3)) << "rank " << r;
}
