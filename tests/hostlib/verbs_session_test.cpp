// SPDX-License-Identifier: BSD-2-Clause
// VerbsSession (hostlib/src/verbs_session.h). The pure parts (ImmDt, GIDs,
// MTU, QP attributes from a tree connection, the posting window) run
// everywhere; the loopback tests need an RDMA device with an IPv4 RoCEv2 GID
// (a RoCE NIC, or `rdma link add rxe0 type rxe netdev eth0`) and skip,
// saying why, without one. There, a second RC QP on the same port plays the
// switch: it takes each SEND_WITH_IMM and answers with the payload + 1.
#include "verbs_session.h"
#include "../common/yaml_edit.h"

#include <incxdp/communicator.h>
#include <incxdp/topology.h>
#include <incxdp/tree.h>

#include <arpa/inet.h>

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>

#ifdef INCXDP_VERBS_FAKE
#include "fake_verbs.h" // hostlib_verbs_fake_tests: fake0 in place of libibverbs
#endif

namespace incxdp::detail {
namespace {

constexpr uint32_t kImmMask = 0xFFFFFF00u; // the reserved low byte is always 0

topo::Topology tree124(std::optional<uint32_t> start_psn = std::nullopt) {
    std::string yaml = test::read_text(std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/tree124.yaml");
    if (start_psn) {
        // The shipped file has its own start_psn line: replace its value.
        const std::string key = "    start_psn: ";
        auto at = yaml.find(key);
        EXPECT_NE(at, std::string::npos);
        auto end = yaml.find_first_of(" \n", at + key.size());
        yaml.replace(at + key.size(), end - (at + key.size()), std::to_string(*start_psn));
    }
    return topo::Topology::parse(yaml);
}

// ---- ImmDt, PSN, GID, MTU --------------------------------------------------

TEST(VerbsImm, LayoutMatchesRoceMd) {
    // dest_rank:16 | primitive:2 | op:2 | dtype:4 | 0:8
    EXPECT_EQ(verbs_imm(3, ROCE_PRIM_REDUCE, ROCE_OPR_MAX, ROCE_DTYPE_FLOAT32), 0x00036100u);
    EXPECT_EQ(verbs_imm(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_SUM, ROCE_DTYPE_INT32),
              0xFFFF1000u);
    EXPECT_EQ(verbs_imm(7, ROCE_PRIM_BROADCAST, ROCE_OPR_BARRIER, 0), 0x00078000u);
    for (uint32_t prim = 0; prim < 3; ++prim)
        for (uint32_t op = 0; op < 4; ++op)
            for (uint32_t dt = 0; dt < 2; ++dt) {
                uint32_t imm = verbs_imm(0x1234, uint8_t(prim), uint8_t(op), uint8_t(dt));
                EXPECT_EQ(imm & ~kImmMask, 0u);
                EXPECT_EQ(roce_imm_dest(imm), 0x1234);
                EXPECT_EQ(roce_imm_prim(imm), prim);
                EXPECT_EQ(roce_imm_op(imm), op);
                EXPECT_EQ(roce_imm_dtype(imm), dt);
            }
}

TEST(VerbsImm, WireOrderIsBigEndian) {
    // ibv_send_wr::imm_data goes to the wire as it is in memory: ImmDt is
    // big-endian on the wire (the AF_XDP path writes it with put32).
    __be32 w = imm_to_wire(0x00036100u);
    uint8_t b[4];
    std::memcpy(b, &w, 4);
    EXPECT_EQ(b[0], 0x00);
    EXPECT_EQ(b[1], 0x03);
    EXPECT_EQ(b[2], 0x61);
    EXPECT_EQ(b[3], 0x00);
    EXPECT_EQ(imm_from_wire(w), 0x00036100u);
}

TEST(VerbsImm, SameCollectiveIgnoresDestRankOnly) {
    uint32_t a = verbs_imm(2, ROCE_PRIM_REDUCE, ROCE_OPR_SUM, ROCE_DTYPE_INT32);
    EXPECT_TRUE(imm_same_collective(a, verbs_imm(5, ROCE_PRIM_REDUCE, ROCE_OPR_SUM, 0)));
    EXPECT_FALSE(imm_same_collective(a, verbs_imm(2, ROCE_PRIM_BROADCAST, ROCE_OPR_SUM, 0)));
    EXPECT_FALSE(imm_same_collective(a, verbs_imm(2, ROCE_PRIM_REDUCE, ROCE_OPR_MIN, 0)));
    EXPECT_FALSE(imm_same_collective(a, verbs_imm(2, ROCE_PRIM_REDUCE, ROCE_OPR_SUM, 1)));
}

TEST(VerbsPsn, WrapsAt24Bits) {
    EXPECT_EQ(verbs_psn(0xFFFFF0, 0), 0xFFFFF0u);
    EXPECT_EQ(verbs_psn(0xFFFFF0, 0x0F), 0xFFFFFFu);
    EXPECT_EQ(verbs_psn(0xFFFFF0, 0x10), 0u);
    EXPECT_EQ(verbs_psn(0xFFFFF0, 0x20), 0x10u);
    EXPECT_EQ(verbs_psn(5, (uint64_t(1) << 24) * 3 + 7), 12u);
}

TEST(VerbsGid, Ipv4Mapped) {
    ibv_gid g = ipv4_mapped_gid("10.79.0.251");
    const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 79, 0, 251};
    EXPECT_EQ(std::memcmp(g.raw, want, 16), 0);
    EXPECT_EQ(gid_to_string(g), "::ffff:10.79.0.251");
    try {
        ipv4_mapped_gid("10.79.0", "switch_ip");
        FAIL() << "no throw";
    } catch (const std::invalid_argument &e) {
        EXPECT_NE(std::string(e.what()).find("switch_ip '10.79.0'"), std::string::npos) << e.what();
    }
}

TEST(VerbsMtu, PathMtuHoldsOnePacketPerSend) {
    EXPECT_EQ(mtu_bytes(IBV_MTU_256), 256u);
    EXPECT_EQ(mtu_bytes(IBV_MTU_4096), 4096u);
    EXPECT_EQ(path_mtu_for(2048, IBV_MTU_4096), IBV_MTU_2048); // the protocol's path MTU
    EXPECT_EQ(path_mtu_for(2048, IBV_MTU_2048), IBV_MTU_2048);
    EXPECT_EQ(path_mtu_for(1024, IBV_MTU_1024), IBV_MTU_1024);
    EXPECT_EQ(path_mtu_for(0, IBV_MTU_256), IBV_MTU_256);
    try {
        path_mtu_for(2048, IBV_MTU_1024); // rxe on a 1500 B netdev
        FAIL() << "no throw";
    } catch (const std::invalid_argument &e) {
        std::string m = e.what();
        EXPECT_NE(m.find("2048"), std::string::npos) << m;
        EXPECT_NE(m.find("active MTU is 1024"), std::string::npos) << m;
    }
}

// ---- config and QP attributes from the tree ---------------------------------

void expect_attrs_follow(const topo::RoceConn &c) {
    VerbsConfig cfg = verbs_config_from(c);
    EXPECT_EQ(cfg.local_ip, c.child_ip);
    EXPECT_EQ(cfg.switch_ip, c.parent_ip);
    EXPECT_EQ(cfg.remote_qpn, c.parent_qpn);
    EXPECT_EQ(cfg.sq_psn, c.up_base);
    EXPECT_EQ(cfg.rq_psn, c.down_base);
    EXPECT_NO_THROW(cfg.validate());

    VerbsPath path{1, 3, IBV_MTU_2048};
    QpTransition init = init_attr(path);
    EXPECT_EQ(init.attr.qp_state, IBV_QPS_INIT);
    EXPECT_EQ(init.attr.port_num, 1);
    EXPECT_EQ(init.attr.pkey_index, 0);
    EXPECT_EQ(init.attr.qp_access_flags, 0u);
    EXPECT_EQ(init.mask, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);

    QpTransition rtr = rtr_attr(cfg, path);
    EXPECT_EQ(rtr.attr.qp_state, IBV_QPS_RTR);
    EXPECT_EQ(rtr.attr.dest_qp_num, c.parent_qpn);
    EXPECT_EQ(rtr.attr.rq_psn, c.down_base);
    EXPECT_EQ(rtr.attr.path_mtu, IBV_MTU_2048);
    EXPECT_EQ(rtr.attr.ah_attr.is_global, 1);
    EXPECT_EQ(rtr.attr.ah_attr.port_num, 1);
    EXPECT_EQ(rtr.attr.ah_attr.grh.sgid_index, 3);
    EXPECT_EQ(rtr.attr.ah_attr.grh.hop_limit, 64);
    EXPECT_EQ(rtr.attr.ah_attr.grh.traffic_class, 0);
    EXPECT_EQ(gid_to_string(rtr.attr.ah_attr.grh.dgid), "::ffff:" + c.parent_ip);
    EXPECT_GE(rtr.attr.max_dest_rd_atomic, 1);
    EXPECT_EQ(rtr.mask, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                            IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);

    QpTransition rts = rts_attr(cfg);
    EXPECT_EQ(rts.attr.qp_state, IBV_QPS_RTS);
    EXPECT_EQ(rts.attr.sq_psn, c.up_base);
    EXPECT_EQ(rts.attr.timeout, 14);
    EXPECT_EQ(rts.attr.retry_cnt, 7);
    EXPECT_EQ(rts.attr.rnr_retry, 7);
    EXPECT_EQ(rts.mask, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                            IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
}

TEST(VerbsAttr, FollowTheTreePlanOfEveryRank) {
    topo::TreePlan plan = topo::plan_tree(tree124(), 1);
    ASSERT_EQ(plan.ranks.size(), 4u);
    for (uint32_t r = 0; r < 4; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const topo::RoceConn &c = plan.conn_of_rank(r);
        EXPECT_FALSE(c.child_is_switch);
        expect_attrs_follow(c);
    }
    // h0 hangs below s1 (10.79.0.251), not below the root.
    EXPECT_EQ(verbs_config_from(plan.conn_of_rank(0)).switch_ip, "10.79.0.251");
}

TEST(VerbsAttr, StartPsnNearTheWrap) {
    // Connections 2..5 are the hosts' (after s0-s1, s0-s2): bases start + 16 c
    // (up) and + 8 (down), all in the last 0x60 PSNs below 2^24.
    topo::TreePlan plan = topo::plan_tree(tree124(0xFFFFA0), 1);
    for (uint32_t r = 0; r < 4; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const topo::RoceConn &c = plan.conn_of_rank(r);
        expect_attrs_follow(c);
        VerbsConfig cfg = verbs_config_from(c);
        EXPECT_GE(rts_attr(cfg).attr.sq_psn, 0xFFFFC0u);
        EXPECT_GE(rtr_attr(cfg, VerbsPath{}).attr.rq_psn, 0xFFFFC8u);
        // Both streams wrap within the first 64 packets.
        EXPECT_LT(verbs_psn(cfg.sq_psn, 64), cfg.sq_psn);
        EXPECT_LT(verbs_psn(cfg.rq_psn, 64), cfg.rq_psn);
    }
}

TEST(VerbsConfig, ValidateNamesTheField) {
    VerbsConfig ok = verbs_config_from(topo::plan_tree(tree124(), 1).conn_of_rank(2));
    ASSERT_NO_THROW(ok.validate());
    auto expect_bad = [&](auto mutate, const char *needle) {
        VerbsConfig c = ok;
        mutate(c);
        try {
            c.validate();
            ADD_FAILURE() << "no throw for " << needle;
        } catch (const std::invalid_argument &e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
    };
    expect_bad([](VerbsConfig &c) { c.switch_ip.clear(); }, "switch_ip");
    expect_bad([](VerbsConfig &c) { c.switch_ip = "s1"; }, "switch_ip 's1'");
    expect_bad([](VerbsConfig &c) { c.local_ip.clear(); }, "local_ip is empty");
    expect_bad([](VerbsConfig &c) { c.remote_qpn = 1; }, "remote_qpn");
    expect_bad([](VerbsConfig &c) { c.remote_qpn = 1u << 24; }, "remote_qpn");
    expect_bad([](VerbsConfig &c) { c.sq_psn = 1u << 24; }, "24 bits");
    expect_bad([](VerbsConfig &c) { c.window = 0; }, "window 0");
    expect_bad([](VerbsConfig &c) { c.max_payload = ROCE_MAX_PAYLOAD + 4; },
               ("max_payload " + std::to_string(ROCE_MAX_PAYLOAD + 4)).c_str());
    expect_bad([](VerbsConfig &c) { c.max_payload = 6; }, "max_payload 6");
    expect_bad([](VerbsConfig &c) { c.signal_every = 0; }, "signal_every");
    expect_bad([](VerbsConfig &c) { c.retry_cnt = 8; }, "retry_cnt 8");
    // An explicit GID index needs no local_ip.
    VerbsConfig c = ok;
    c.local_ip.clear();
    c.gid_index = 1;
    EXPECT_NO_THROW(c.validate());
}

// ---- the posting window ------------------------------------------------------

TEST(VerbsWindow, WindowBoundsPacketsWithoutResult) {
    VerbsWindow w(4, 8, 2);
    w.start(10);
    for (int i = 0; i < 4; ++i)
        EXPECT_EQ(w.post().idx, uint64_t(i));
    EXPECT_FALSE(w.can_post());
    EXPECT_EQ(w.result(), 0u);
    EXPECT_TRUE(w.can_post());
    EXPECT_EQ(w.post().idx, 4u);
    EXPECT_FALSE(w.can_post());
    EXPECT_THROW(w.post(), std::logic_error);
}

TEST(VerbsWindow, SignalsEveryKAndTheLastOfARun) {
    VerbsWindow w(100, 16, 4);
    w.start(10);
    std::vector<uint64_t> signaled;
    while (w.can_post()) {
        auto p = w.post();
        if (p.signaled)
            signaled.push_back(p.seq);
    }
    EXPECT_EQ(signaled, (std::vector<uint64_t>{3, 7, 9}));
    for (int i = 0; i < 10; ++i)
        w.result();
    EXPECT_TRUE(w.done());
    // The next run continues the send sequence: 4 after the last signaled.
    w.start(6);
    signaled.clear();
    while (w.can_post()) {
        auto p = w.post();
        if (p.signaled)
            signaled.push_back(p.seq);
    }
    EXPECT_EQ(signaled, (std::vector<uint64_t>{13, 15}));
}

TEST(VerbsWindow, FullSendQueueWaitsForACompletion) {
    VerbsWindow w(100, 8, 4);
    w.start(20);
    for (int i = 0; i < 8; ++i)
        w.post();
    EXPECT_FALSE(w.can_post()); // 8 WRs in the send queue
    w.send_done(3);
    EXPECT_EQ(w.sq_free_from(), 4u);
    int more = 0;
    while (w.can_post()) {
        w.post();
        ++more;
    }
    EXPECT_EQ(more, 4);
    EXPECT_THROW(w.send_done(100), std::logic_error);
}

TEST(VerbsWindow, ResultWithoutPacketAndEarlyStartThrow) {
    VerbsWindow w(4, 8, 4);
    w.start(3);
    EXPECT_THROW(w.result(), std::logic_error);
    w.post();
    EXPECT_THROW(w.start(3), std::logic_error);
    EXPECT_THROW(VerbsWindow(4, 2, 4), std::invalid_argument);
}

// A device that completes signaled sends and delivers results in idx order
// at random moments: every run finishes, the window and the send queue are
// never exceeded, and every send buffer is free before it is reused.
TEST(VerbsWindow, RandomCompletionOrderNeverStalls) {
    std::mt19937 rng(7);
    for (uint32_t trial = 0; trial < 200; ++trial) {
        uint32_t window = 1 + rng() % 16, k = 1 + rng() % 8;
        VerbsWindow w(window, window + k, k);
        std::vector<std::pair<uint64_t, bool>> in_sq; // seq, signaled
        for (int run = 0; run < 3; ++run) {
            uint64_t n = rng() % 50;
            w.start(n);
            uint64_t steps = 0;
            while (!w.done()) {
                ASSERT_LT(++steps, 100000u) << "stalled: trial " << trial;
                if (w.can_post() && rng() % 2) {
                    auto p = w.post();
                    in_sq.push_back({p.seq, p.signaled});
                    ASSERT_LE(w.posted() - w.results(), window);
                    ASSERT_LE(w.seq() - w.sq_free_from(), w.sq_depth());
                    continue;
                }
                bool can_result = w.results() < w.posted();
                auto sig =
                    std::find_if(in_sq.begin(), in_sq.end(), [](auto &e) { return e.second; });
                if (sig != in_sq.end() && (rng() % 2 || !can_result)) {
                    w.send_done(sig->first); // completes everything before it too
                    in_sq.erase(in_sq.begin(), sig + 1);
                } else if (can_result) {
                    w.result();
                } else {
                    ASSERT_TRUE(w.can_post()) << "deadlock: trial " << trial;
                }
            }
        }
    }
}

// ---- without a device --------------------------------------------------------

TEST(VerbsSession, AvailableSaysWhyNot) {
    std::string why;
    bool ok = VerbsSession::available(&why);
    if (ok)
        GTEST_SKIP() << "an RDMA device exists here";
    EXPECT_EQ(why.rfind("no RDMA device", 0), 0u) << why;
    std::cout << "[ INFO     ] " << why << "\n";
}

TEST(VerbsSession, NoDeviceIsAClearError) {
    if (VerbsSession::available())
        GTEST_SKIP() << "an RDMA device exists here";
    VerbsConfig cfg = verbs_config_from(topo::plan_tree(tree124(), 1).conn_of_rank(0));
    try {
        VerbsSession s(cfg);
        FAIL() << "opened a session without a device";
    } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("no RDMA device"), std::string::npos) << e.what();
    }
    cfg.window = 0; // config errors come first, device or not
    EXPECT_THROW(VerbsSession{cfg}, std::invalid_argument);
}

// ---- loopback on a device ------------------------------------------------------

/// The first IPv4 RoCEv2 GID of any device: (device, ip). Empty if none.
std::pair<std::string, std::string> find_ipv4_roce_gid() {
    int n = 0;
    ibv_device **list = ibv_get_device_list(&n);
    std::pair<std::string, std::string> found;
    for (int d = 0; list && d < n && found.first.empty(); ++d) {
        ibv_context *ctx = ibv_open_device(list[d]);
        if (!ctx)
            continue;
        ibv_device_attr da{};
        ibv_query_device(ctx, &da);
        for (uint32_t p = 1; p <= da.phys_port_cnt && found.first.empty(); ++p) {
            ibv_port_attr pa{};
            if (ibv_query_port(ctx, uint8_t(p), &pa) || pa.state != IBV_PORT_ACTIVE)
                continue;
            for (int i = 0; i < pa.gid_tbl_len; ++i) {
                ibv_gid_entry e{};
                if (ibv_query_gid_ex(ctx, p, uint32_t(i), &e, 0) ||
                    e.gid_type != IBV_GID_TYPE_ROCE_V2)
                    continue;
                static const uint8_t prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
                if (std::memcmp(e.gid.raw, prefix, 12) != 0)
                    continue;
                char ip[INET_ADDRSTRLEN];
                inet_ntop(AF_INET, &e.gid.raw[12], ip, sizeof(ip));
                found = {ibv_get_device_name(list[d]), ip};
                break;
            }
        }
        ibv_close_device(ctx);
    }
    if (list)
        ibv_free_device_list(list);
    return found;
}

/// The "switch": an RC QP on the same port that answers every SEND with a
/// SEND of the same ImmDt (or `reply_imm`) and each be32 of the payload + 1.
class EchoPeer {
  public:
    static constexpr uint32_t kDepth = 256;

    EchoPeer(const std::string &device, const std::string &ip, uint32_t max_payload)
        : max_payload_(max_payload) {
        VerbsConfig c;
        c.device = device;
        c.local_ip = ip;
        c.switch_ip = ip;
        c.remote_qpn = 2; // not known yet; set in connect()
        dev_ = std::make_unique<VerbsDevice>(c);
        cq_ = ibv_create_cq(dev_->context(), 2 * kDepth, nullptr, nullptr, 0);
        if (!cq_)
            throw std::system_error(errno, std::generic_category(), "echo: ibv_create_cq");
        ibv_qp_init_attr qia{};
        qia.send_cq = qia.recv_cq = cq_;
        qia.qp_type = IBV_QPT_RC;
        qia.cap = {kDepth, kDepth, 1, 1, 0};
        qp_ = ibv_create_qp(dev_->pd(), &qia);
        if (!qp_)
            throw std::system_error(errno, std::generic_category(), "echo: ibv_create_qp");
        mem_.resize(2 * kDepth * size_t(std::max(max_payload, 4u)));
        mr_ = ibv_reg_mr(dev_->pd(), mem_.data(), mem_.size(), IBV_ACCESS_LOCAL_WRITE);
        if (!mr_)
            throw std::system_error(errno, std::generic_category(), "echo: ibv_reg_mr");
        path_ = VerbsPath{dev_->port(), dev_->gid_index(),
                          path_mtu_for(max_payload, dev_->active_mtu())};
        QpTransition init = init_attr(path_);
        check(ibv_modify_qp(qp_, &init.attr, init.mask), "INIT");
        for (uint32_t s = 0; s < kDepth; ++s)
            post_recv(s);
    }
    ~EchoPeer() {
        stop();
        ibv_destroy_qp(qp_);
        ibv_destroy_cq(cq_);
        ibv_dereg_mr(mr_);
    }

    uint32_t qpn() const { return qp_->qp_num; }

    /// The mirror of the host's connection: our rq is its sq and back.
    void connect(const VerbsConfig &host, uint32_t host_qpn) {
        VerbsConfig me;
        me.switch_ip = host.switch_ip; // one IP: loopback on the same GID
        me.remote_qpn = host_qpn;
        me.sq_psn = host.rq_psn;
        me.rq_psn = host.sq_psn;
        QpTransition rtr = rtr_attr(me, path_);
        check(ibv_modify_qp(qp_, &rtr.attr, rtr.mask), "RTR");
        QpTransition rts = rts_attr(me);
        check(ibv_modify_qp(qp_, &rts.attr, rts.mask), "RTS");
        thread_ = std::thread([this] { loop(); });
    }

    void stop() {
        stop_ = true;
        if (thread_.joinable())
            thread_.join();
    }

    std::atomic<uint64_t> received{0};
    std::atomic<bool> answer{true};     ///< false: take SENDs, never answer
    std::atomic<uint32_t> reply_imm{0}; ///< != 0: answer with this ImmDt
    std::vector<uint32_t> imms;         ///< ImmDt of every SEND, in order (after stop())
    std::vector<size_t> lens;
    std::string error;

  private:
    void check(int e, const char *what) {
        if (e)
            throw std::system_error(e, std::generic_category(),
                                    std::string("echo: modify ") + what);
    }
    std::byte *buf(uint32_t i) { return mem_.data() + size_t(i) * std::max(max_payload_, 4u); }
    void post_recv(uint32_t slot) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(buf(slot)), max_payload_, mr_->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = slot;
        wr.sg_list = &sge;
        wr.num_sge = max_payload_ ? 1 : 0;
        ibv_recv_wr *bad;
        if (ibv_post_recv(qp_, &wr, &bad))
            error = "echo: ibv_post_recv";
    }
    void loop() {
        ibv_wc wc[16];
        uint64_t next_send = 0, sends_out = 0;
        while (!stop_ && error.empty()) {
            int n = ibv_poll_cq(cq_, 16, wc);
            for (int i = 0; i < n; ++i) {
                if (wc[i].status != IBV_WC_SUCCESS) {
                    error = std::string("echo: completion ") + ibv_wc_status_str(wc[i].status);
                    break;
                }
                if (wc[i].opcode == IBV_WC_SEND) {
                    --sends_out;
                    continue;
                }
                uint32_t slot = uint32_t(wc[i].wr_id);
                uint32_t imm =
                    (wc[i].wc_flags & IBV_WC_WITH_IMM) ? imm_from_wire(wc[i].imm_data) : 0xdeadbeef;
                imms.push_back(imm);
                lens.push_back(wc[i].byte_len);
                received++;
                if (answer && sends_out < kDepth) {
                    std::byte *out = buf(kDepth + uint32_t(next_send % kDepth));
                    for (uint32_t b = 0; b + 4 <= wc[i].byte_len; b += 4) {
                        uint32_t v;
                        std::memcpy(&v, buf(slot) + b, 4);
                        v = htonl(ntohl(v) + 1);
                        std::memcpy(out + b, &v, 4);
                    }
                    ibv_sge sge{reinterpret_cast<uintptr_t>(out), wc[i].byte_len, mr_->lkey};
                    ibv_send_wr wr{};
                    wr.wr_id = next_send++;
                    wr.opcode = IBV_WR_SEND_WITH_IMM;
                    wr.imm_data = imm_to_wire(reply_imm ? reply_imm.load() : imm);
                    wr.send_flags = IBV_SEND_SIGNALED;
                    wr.sg_list = &sge;
                    wr.num_sge = wc[i].byte_len ? 1 : 0;
                    ibv_send_wr *bad;
                    if (ibv_post_send(qp_, &wr, &bad))
                        error = "echo: ibv_post_send";
                    ++sends_out;
                }
                post_recv(slot);
            }
            if (n == 0)
                std::this_thread::yield();
        }
    }

    uint32_t max_payload_;
    std::unique_ptr<VerbsDevice> dev_;
    ibv_cq *cq_ = nullptr;
    ibv_qp *qp_ = nullptr;
    ibv_mr *mr_ = nullptr;
    std::vector<std::byte> mem_;
    VerbsPath path_;
    std::atomic<bool> stop_{false};
    std::thread thread_;
};

/// A collective for the echo "switch": n packets of one ImmDt, payload from
/// `fill` (bytes, a multiple of 4), each result as long as its packet.
class EchoCall final : public RocePackets {
  public:
    using Fill = std::function<size_t(uint64_t k, std::span<std::byte> buf)>;
    using Take = std::function<void(uint64_t k, std::span<const std::byte> payload)>;
    EchoCall(uint64_t n, uint32_t imm, Fill fill, Take take = {})
        : n_(n), imm_(imm), fill_(std::move(fill)), take_(std::move(take)), sent_(n) {}

    uint64_t count() const override { return n_; }
    uint32_t build(uint64_t k, std::span<std::byte> p, uint32_t &imm) override {
        imm = imm_;
        size_t len = fill_(k, p);
        EXPECT_EQ(len % 4, 0u) << "packet " << k;
        sent_[k] = uint32_t(len / 4);
        return sent_[k];
    }
    uint32_t result_elems(uint64_t k) const override { return sent_[k] + result_skew; }
    void consume(uint64_t k, std::span<const std::byte> p) override {
        if (take_)
            take_(k, p);
    }

    uint32_t result_skew = 0; ///< expect results this many elements longer than sent

  private:
    uint64_t n_;
    uint32_t imm_;
    Fill fill_;
    Take take_;
    std::vector<uint32_t> sent_;
};

class VerbsLoopback : public ::testing::Test {
  protected:
    void SetUp() override {
        std::string why;
        if (!VerbsSession::available(&why))
            GTEST_SKIP() << why;
        std::tie(device_, ip_) = find_ipv4_roce_gid();
        if (device_.empty())
            GTEST_SKIP() << "no ACTIVE port with an IPv4 RoCEv2 GID (give the netdev an IPv4 "
                            "address)";
    }

#ifdef INCXDP_VERBS_FAKE
    void TearDown() override {
        EXPECT_EQ(fakeverbs::take_errors(), "");
    }
#endif

    // The host's side of a connection whose PSNs both wrap within 64 packets.
    VerbsConfig host_config(uint32_t echo_qpn, uint32_t max_payload) const {
        VerbsConfig c;
        c.device = device_;
        c.local_ip = ip_;
        c.switch_ip = ip_;
        c.remote_qpn = echo_qpn;
        c.sq_psn = 0xFFFFF0;
        c.rq_psn = 0xFFFFE0;
        c.window = 8;
        c.signal_every = 4;
        c.max_payload = max_payload;
        c.timeout = std::chrono::milliseconds(5000);
        return c;
    }

    uint32_t max_payload() const {
        VerbsConfig c;
        c.device = device_;
        c.local_ip = ip_;
        c.switch_ip = ip_;
        c.remote_qpn = 2;
        VerbsDevice d(c);
        return std::min<uint32_t>(ROCE_MAX_PAYLOAD, mtu_bytes(d.active_mtu()));
    }

    std::string device_, ip_;
};

TEST_F(VerbsLoopback, EchoAcrossThePsnWrap) {
    const uint32_t maxp = max_payload();
    EchoPeer echo(device_, ip_, maxp);
    VerbsConfig cfg = host_config(echo.qpn(), maxp);
    VerbsSession s(cfg);
    echo.connect(cfg, s.qp_num());
    std::cout << "[ INFO     ] " << s.describe() << ", echo qpn 0x" << std::hex << echo.qpn()
              << std::dec << "\n";

    // Lengths 0, 64, 128, ... up to max_payload, value = idx * 1000 + word.
    auto len_of = [&](uint64_t i) { return size_t((i * 64) % (maxp + 64)); };
    std::vector<uint64_t> seen;
    uint64_t sleeps = 0;
    auto run = [&](uint64_t n, uint32_t imm) {
        seen.clear();
        EchoCall call(
            n, imm,
            [&](uint64_t i, std::span<std::byte> buf) {
                size_t len = std::min(len_of(i), buf.size());
                for (size_t b = 0; b < len; b += 4) {
                    uint32_t v = htonl(uint32_t(i * 1000 + b / 4));
                    std::memcpy(buf.data() + b, &v, 4);
                }
                return len;
            },
            [&](uint64_t i, std::span<const std::byte> p) {
                seen.push_back(i);
                ASSERT_EQ(p.size(), std::min<size_t>(len_of(i), maxp)) << "idx " << i;
                for (size_t b = 0; b < p.size(); b += 4) {
                    uint32_t v;
                    std::memcpy(&v, p.data() + b, 4);
                    ASSERT_EQ(ntohl(v), uint32_t(i * 1000 + b / 4 + 1)) << "idx " << i;
                }
            });
        VerbsRunStats st = s.run(call);
        EXPECT_EQ(st.packets_sent, n);
        EXPECT_EQ(st.results, n);
        sleeps += st.cq_sleeps;
        std::vector<uint64_t> want(n);
        for (uint64_t i = 0; i < n; ++i)
            want[i] = i;
        EXPECT_EQ(seen, want);
    };
    const uint32_t sum = verbs_imm(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_SUM, 0);
    const uint32_t bcast = verbs_imm(2, ROCE_PRIM_BROADCAST, ROCE_OPR_SUM, ROCE_DTYPE_INT32);
    run(100, sum); // both PSN streams wrap (sq at idx 16, rq at idx 32)
    run(37, bcast);
    run(0, sum);
    EXPECT_EQ(s.next_idx(), 137u);
    echo.stop();
    ASSERT_EQ(echo.error, "");
    ASSERT_EQ(echo.imms.size(), 137u);
    for (size_t i = 0; i < 137; ++i)
        ASSERT_EQ(echo.imms[i], i < 100 ? sum : bcast) << "packet " << i;
#ifdef INCXDP_VERBS_FAKE
    // The fake shows the PSNs: one per idx on both streams, across the wrap.
    std::vector<uint32_t> up = fakeverbs::sent_psns(s.qp_num());
    std::vector<uint32_t> down = fakeverbs::sent_psns(echo.qpn());
    ASSERT_EQ(up.size(), 137u);
    ASSERT_EQ(down.size(), 137u);
    for (uint64_t i = 0; i < 137; ++i) {
        ASSERT_EQ(up[i], verbs_psn(cfg.sq_psn, i)) << "idx " << i;
        ASSERT_EQ(down[i], verbs_psn(cfg.rq_psn, i)) << "idx " << i;
    }
    EXPECT_GT(sleeps, 0u); // the fake's 100 us delay outlasts the 50 us spin
#endif
}

TEST_F(VerbsLoopback, NoResultIsATimeoutNamingTheIdx) {
    const uint32_t maxp = max_payload();
    EchoPeer echo(device_, ip_, maxp);
    echo.answer = false; // the device ACKs, the "switch" never answers
    VerbsConfig cfg = host_config(echo.qpn(), maxp);
    cfg.timeout = std::chrono::milliseconds(300);
    VerbsSession s(cfg);
    echo.connect(cfg, s.qp_num());
    auto empty = [](uint64_t, std::span<std::byte>) { return size_t(0); };
    EchoCall twenty(20, 0, empty), one(1, 0, empty);
    try {
        s.run(twenty);
        FAIL() << "no timeout";
    } catch (const VerbsTimeout &e) {
        EXPECT_EQ(e.idx, 0u);
        std::string m = e.what();
        EXPECT_NE(m.find("idx 0 (down PSN 0xffffe0)"), std::string::npos) << m;
        EXPECT_NE(m.find("8 of 20 packets"), std::string::npos) << m; // the window
        EXPECT_NE(m.find("child QPN"), std::string::npos) << m;
    }
    EXPECT_THROW(s.run(one), std::logic_error);
    EXPECT_EQ(echo.received.load(), 8u);
}

// VerbsConfig::stop (CommConfig::stop, set by the tools' signal handlers)
// ends a run that waits for results, long before its timeout.
TEST_F(VerbsLoopback, StopEndsAWaitingRun) {
    const uint32_t maxp = max_payload();
    EchoPeer echo(device_, ip_, maxp);
    echo.answer = false; // the "switch" never answers
    std::atomic<bool> stop{true};
    VerbsConfig cfg = host_config(echo.qpn(), maxp);
    cfg.timeout = std::chrono::milliseconds(120000);
    cfg.stop = &stop;
    VerbsSession s(cfg);
    echo.connect(cfg, s.qp_num());
    auto empty = [](uint64_t, std::span<std::byte>) { return size_t(0); };
    EchoCall twenty(20, 0, empty);
    EXPECT_THROW(s.run(twenty), VerbsInterrupted);
}

TEST_F(VerbsLoopback, ResultOfAnotherCollectiveIsAnError) {
    const uint32_t maxp = max_payload();
    EchoPeer echo(device_, ip_, maxp);
    echo.reply_imm = verbs_imm(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_MAX, 0);
    VerbsConfig cfg = host_config(echo.qpn(), maxp);
    VerbsSession s(cfg);
    echo.connect(cfg, s.qp_num());
    try {
        EchoCall call(4, verbs_imm(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_SUM, 0),
                      [](uint64_t, std::span<std::byte>) { return size_t(64); });
        s.run(call);
        FAIL() << "no error";
    } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("disagree on the idx"), std::string::npos) << e.what();
    }
}

// ---- the Communicator on Carrier::Verbs ----------------------------------

// A one-rank job whose "switch" is the echo: every result is the packet's
// int32 + 1, so each collective's result is known exactly, and any packet
// sent, lost or matched to the wrong idx shows.
class VerbsCommunicator : public VerbsLoopback {
  protected:
    CommConfig comm_config(EchoPeer &echo, uint32_t maxp, uint32_t *published) {
        CommConfig c;
        c.protocol = Protocol::Roce;
        c.carrier = Carrier::Verbs;
        c.rank = 0;
        c.world_size = 1;
        c.job = 7;
        c.local_ip = c.switch_ip = ip_;
        c.window = 8;
        c.elems_per_packet = maxp / 4 / 16 * 16;
        c.roce.remote_qpn = echo.qpn();
        c.roce.up_base = 0xFFFFF0; // both streams wrap within the first 32 packets
        c.roce.down_base = 0xFFFFE0;
        c.deadline = std::chrono::milliseconds(5000);
        c.verbs.device = device_;
        c.verbs.publish_qpn = [&echo, published, c](uint32_t qpn) {
            *published = qpn;
            VerbsConfig host;
            host.switch_ip = c.switch_ip;
            host.sq_psn = c.roce.up_base;
            host.rq_psn = c.roce.down_base;
            echo.connect(host, qpn);
        };
        return c;
    }
};

TEST_F(VerbsCommunicator, CollectivesThroughTheDevice) {
    const uint32_t maxp = max_payload();
    EchoPeer echo(device_, ip_, maxp);
    uint32_t published = 0;
    Communicator comm(comm_config(echo, maxp, &published));
    ASSERT_NE(published, 0u);
    const uint32_t per = comm.config().effective_elems_per_packet();
    const size_t n = 3 * per + 48; // a short last packet

    std::vector<int32_t> x(n), y(n, 0);
    for (size_t i = 0; i < n; ++i)
        x[i] = int32_t(i * 7919) - 1000000;
    comm.allreduce(x, y, ReduceOp::Sum);
    for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(y[i], x[i] + 1) << "allreduce element " << i;
    EXPECT_EQ(comm.last_stats().packets_sent, 4u);
    EXPECT_EQ(comm.last_stats().results, 4u);

    std::fill(y.begin(), y.end(), 0);
    comm.reduce(x.data(), y.data(), n, DType::Int32, ReduceOp::Max, 0);
    for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(y[i], x[i] + 1) << "reduce element " << i;

    std::vector<int32_t> b = x;
    comm.broadcast(b.data(), n, DType::Int32, 0);
    for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(b[i], x[i] + 1) << "broadcast element " << i;

    comm.barrier();
    EXPECT_EQ(comm.last_stats().packets_sent, 1u);

    // float32 MAX travels as order-preserving int32 keys: key + 1 is the
    // next float up, from either side of zero.
    std::vector<float> f(n), g(n);
    for (size_t i = 0; i < n; ++i)
        f[i] = (i % 2 ? -1.0f : 1.0f) * (0.5f + float(i) / float(n));
    std::vector<float> h(n);
    comm.allreduce(f, h, ReduceOp::Max);
    for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(h[i], std::nextafter(f[i], INFINITY)) << "float max element " << i;

    // float32 SUM: an exponent pre-pass (one packet for 4 data packets),
    // whose echo raises the agreed exponent by one, then the data, which
    // must wait for it: the result is the input within the quantum.
    comm.allreduce(f, g, ReduceOp::Sum);
    EXPECT_EQ(comm.last_stats().packets_sent, 5u);
    for (size_t i = 0; i < n; ++i)
        ASSERT_NEAR(g[i], f[i], 1e-6) << "float sum element " << i;

    echo.stop();
    ASSERT_EQ(echo.error, "");
    // Every packet at its idx: 4 + 4 + 4 + 1 + 4 + 5.
    EXPECT_EQ(echo.imms.size(), 22u);
    EXPECT_EQ(comm.total_stats().packets_sent, 22u);
#ifdef INCXDP_VERBS_FAKE
    std::vector<uint32_t> up = fakeverbs::sent_psns(published);
    ASSERT_EQ(up.size(), 22u);
    for (uint64_t i = 0; i < up.size(); ++i)
        ASSERT_EQ(up[i], verbs_psn(0xFFFFF0, i)) << "idx " << i;
#endif
}

TEST_F(VerbsCommunicator, PublishFailureAndNoDeviceConfigAreClearErrors) {
    const uint32_t maxp = max_payload();
    EchoPeer echo(device_, ip_, maxp);
    uint32_t published = 0;
    CommConfig c = comm_config(echo, maxp, &published);
    c.verbs.publish_qpn = [](uint32_t qpn) {
        throw std::runtime_error(fmt::format("controller refused qpn {:#x}", qpn));
    };
    try {
        Communicator comm(c);
        FAIL() << "no error";
    } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("controller refused qpn"), std::string::npos)
            << e.what();
    }
    c = comm_config(echo, maxp, &published);
    c.verbs.device = "nosuchdev9";
    try {
        Communicator comm(c);
        FAIL() << "no error";
    } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("nosuchdev9"), std::string::npos) << e.what();
    }
    EXPECT_EQ(published, 0u);
    c = comm_config(echo, maxp, &published);
    c.roce.remote_qpn = 0;
    EXPECT_THROW(Communicator{c}, std::invalid_argument);
}

TEST_F(VerbsLoopback, ResultOfAnotherLengthIsAnError) {
    const uint32_t maxp = max_payload();
    EchoPeer echo(device_, ip_, maxp);
    VerbsConfig cfg = host_config(echo.qpn(), maxp);
    VerbsSession s(cfg);
    echo.connect(cfg, s.qp_num());
    EchoCall call(3, verbs_imm(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_SUM, 0),
                  [](uint64_t, std::span<std::byte>) { return size_t(64); });
    call.result_skew = 16;
    try {
        s.run(call);
        FAIL() << "no error";
    } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("has 64 B of payload, this collective expects 128 B"),
                  std::string::npos)
            << e.what();
    }
}

#ifdef INCXDP_VERBS_FAKE
// What a real device does when the switch takes SENDs without ever ACKing
// them (docs/ROCE.md §3 sends no ACK for the packet that completes a set):
// the results still come, but the QP fails once the retries run out.
TEST_F(VerbsLoopback, SwitchThatNeverAcksFailsTheQp) {
    const uint32_t maxp = max_payload();
    EchoPeer echo(device_, ip_, maxp);
    fakeverbs::set_no_ack(echo.qpn());
    VerbsConfig cfg = host_config(echo.qpn(), maxp);
    cfg.ack_timeout = 14; // 67 ms, two tries: fails 134 ms after the first SEND
    cfg.retry_cnt = 1;
    VerbsSession s(cfg);
    echo.connect(cfg, s.qp_num());
    auto sixteen = [](uint64_t, std::span<std::byte>) { return size_t(16); };
    EchoCall first(4, 0, sixteen), second(4, 0, sixteen);
    EXPECT_NO_THROW(s.run(first)); // the results come at once
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    try {
        s.run(second);
        FAIL() << "no error";
    } catch (const std::runtime_error &e) {
        std::string m = e.what();
        EXPECT_NE(m.find("SEND of idx 0 (up PSN 0xfffff0)"), std::string::npos) << m;
        EXPECT_NE(m.find("did not ACK"), std::string::npos) << m;
    }
}
#endif

} // namespace
} // namespace incxdp::detail
