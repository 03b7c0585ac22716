// SPDX-License-Identifier: BSD-2-Clause
// VerbsSession (hostlib/src/verbs_session.h). The pure parts (ImmDt, GIDs,
// MTU, QP attributes from a tree connection, the posting window) run
// everywhere; the loopback tests need an RDMA device with an IPv4 RoCEv2 GID
// (a RoCE NIC, or `rdma link add rxe0 type rxe netdev eth0`) and skip,
// saying why, without one. There, a second RC QP on the same port plays the
// switch: it takes each SEND_WITH_IMM and answers with the payload + 1.
#include "verbs_session.h"
#include "../common/yaml_edit.h"

#include <incxdp/topology.h>
#include <incxdp/tree.h>

#include <arpa/inet.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>
#include <system_error>
#include <thread>

#ifdef INCXDP_VERBS_FAKE
// The in-process device at the end of this file (hostlib_verbs_fake_tests).
namespace fakeverbs {
void set_no_ack(uint32_t qpn);                 ///< SENDs to this QP are taken but never ACKed
std::vector<uint32_t> sent_psns(uint32_t qpn); ///< first PSN of every SEND of the QP
std::string take_errors();                     ///< misuse seen so far (and clear it)
} // namespace fakeverbs
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
    expect_bad([](VerbsConfig &c) { c.max_payload = 2052; }, "max_payload 2052");
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
        VerbsRunStats st = s.run(
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
    auto build = [](uint64_t, std::span<std::byte>) { return size_t(0); };
    auto consume = [](uint64_t, std::span<const std::byte>) {};
    try {
        s.run(20, 0, build, consume);
        FAIL() << "no timeout";
    } catch (const VerbsTimeout &e) {
        EXPECT_EQ(e.idx, 0u);
        std::string m = e.what();
        EXPECT_NE(m.find("idx 0 (down PSN 0xffffe0)"), std::string::npos) << m;
        EXPECT_NE(m.find("8 of 20 packets"), std::string::npos) << m; // the window
        EXPECT_NE(m.find("child QPN"), std::string::npos) << m;
    }
    EXPECT_THROW(s.run(1, 0, build, consume), std::logic_error);
    EXPECT_EQ(echo.received.load(), 8u);
}

TEST_F(VerbsLoopback, ResultOfAnotherCollectiveIsAnError) {
    const uint32_t maxp = max_payload();
    EchoPeer echo(device_, ip_, maxp);
    echo.reply_imm = verbs_imm(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_MAX, 0);
    VerbsConfig cfg = host_config(echo.qpn(), maxp);
    VerbsSession s(cfg);
    echo.connect(cfg, s.qp_num());
    try {
        s.run(
            4, verbs_imm(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_SUM, 0),
            [](uint64_t, std::span<std::byte>) { return size_t(64); },
            [](uint64_t, std::span<const std::byte>) {});
        FAIL() << "no error";
    } catch (const std::runtime_error &e) {
        EXPECT_NE(std::string(e.what()).find("disagree on the idx"), std::string::npos) << e.what();
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
    auto build = [](uint64_t, std::span<std::byte>) { return size_t(16); };
    auto consume = [](uint64_t, std::span<const std::byte>) {};
    EXPECT_NO_THROW(s.run(4, 0, build, consume)); // the results come at once
    std::this_thread::sleep_for(std::chrono::milliseconds(400));
    try {
        s.run(4, 0, build, consume);
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

#ifdef INCXDP_VERBS_FAKE
// ==== fake0: an in-process loopback RDMA device ================================
// Linked into hostlib_verbs_fake_tests in place of libibverbs (which that
// executable does not link, so a verbs call the fake lacks fails the link),
// so VerbsSession's device path runs where there is no RDMA device. One
// device, one ACTIVE Ethernet port (MTU 2048), GIDs 0: RoCEv1 and 2: RoCEv2
// of 192.0.2.1, 1: RoCEv2 fe80::1, 3: empty. RC between its own QPs: a SEND
// lands in the destination QP's next receive WR after `delay` (parked while
// there is none, as endless RNR retries would), then its ACK completes the
// send after another `delay`; everything in order. It refuses or records
// what a device would refuse or what would go wrong unnoticed: QP states and
// attribute masks, PSNs that disagree across the connection, SGEs outside
// their MR, send queue overflow (a WR's slot is freed when a signaled
// completion at or after it is polled), CQ overrun, CQ events not acked
// before ibv_destroy_cq (a real device blocks there).
#include <fmt/format.h>
#include <unistd.h>

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace fakeverbs {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kGidCount = 4;
constexpr ibv_mtu kActiveMtu = IBV_MTU_2048;

struct Cq {
    ibv_cq cq{};
    std::deque<std::pair<ibv_wc, uint64_t>> q; // completion, send seq (or ~0)
    bool armed = false;
    unsigned events = 0, acked = 0;
};

struct Msg {
    uint32_t src = 0, dst = 0, psn = 0, imm = 0;
    std::vector<std::byte> data;
    uint64_t seq = 0;
};

struct Qp {
    ibv_qp qp{};
    ibv_qp_cap cap{};
    uint32_t dest = 0, sq_psn = 0, rq_psn = 0;
    ibv_mtu mtu = IBV_MTU_256;
    uint8_t timeout = 0, retry_cnt = 0;
    uint64_t posted = 0, freed = 0, acked = 0;
    std::map<uint64_t, std::pair<uint64_t, bool>> inflight; // seq -> wr_id, signaled
    std::deque<ibv_recv_wr> rq;
    std::deque<ibv_sge> rq_sge;
    std::deque<Msg> parked;
    std::vector<uint32_t> sent_psns;
};

struct World {
    std::mutex mu;
    std::condition_variable cv;
    std::multimap<Clock::time_point, std::function<void()>> events; // equal times: FIFO
    std::map<uint32_t, Qp *> qps;
    std::vector<ibv_mr *> mrs;
    std::set<uint32_t> no_ack;
    std::map<uint32_t, std::vector<uint32_t>> psns_of_destroyed;
    std::string errors;
    std::chrono::microseconds delay{100};
    uint32_t next_qpn = 0xa1, next_key = 0x100;
    bool stop = false;
    std::thread wire;

    World() {
        wire = std::thread([this] {
            std::unique_lock lk(mu);
            while (!stop) {
                if (events.empty()) {
                    cv.wait(lk);
                } else if (events.begin()->first > Clock::now()) {
                    cv.wait_until(lk, events.begin()->first);
                } else {
                    auto fn = std::move(events.begin()->second);
                    events.erase(events.begin());
                    fn();
                }
            }
        });
    }
    ~World() {
        {
            std::lock_guard lk(mu);
            stop = true;
        }
        cv.notify_all();
        wire.join();
    }
    void at(Clock::duration after, std::function<void()> fn) {
        events.emplace(Clock::now() + after, std::move(fn));
        cv.notify_all();
    }
    void error(const std::string &e) { errors += e + "\n"; }
};

World &W() {
    static World w;
    return w;
}

ibv_gid gid_at(uint32_t i, uint32_t *type) {
    ibv_gid g{};
    if (i == 1) {
        g.raw[0] = 0xfe;
        g.raw[1] = 0x80;
        g.raw[15] = 1;
        *type = IBV_GID_TYPE_ROCE_V2;
    } else {
        g = incxdp::detail::ipv4_mapped_gid("192.0.2.1");
        *type = i == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
    }
    return g;
}

uint32_t packets(size_t len, ibv_mtu mtu) {
    uint32_t m = incxdp::detail::mtu_bytes(mtu);
    return len == 0 ? 1 : uint32_t((len + m - 1) / m);
}

bool sge_ok(const ibv_sge &s) {
    for (ibv_mr *mr : W().mrs)
        if (mr->lkey == s.lkey && s.addr >= uintptr_t(mr->addr) &&
            s.addr + s.length <= uintptr_t(mr->addr) + mr->length)
            return true;
    return false;
}

Qp *qp_of(uint32_t qpn) {
    auto it = W().qps.find(qpn);
    return it == W().qps.end() ? nullptr : it->second;
}

void push_cqe(ibv_cq *c, const ibv_wc &wc, uint64_t seq) {
    Cq *cq = reinterpret_cast<Cq *>(c);
    if (cq->q.size() >= size_t(c->cqe))
        W().error("CQ overrun");
    cq->q.emplace_back(wc, seq);
    if (cq->armed && c->channel) {
        cq->armed = false;
        ssize_t r = write(c->channel->refcnt, &cq, sizeof(cq)); // the pipe's write end
        (void)r;
    }
}

ibv_wc wc_for(Qp *q, uint64_t wr_id, ibv_wc_status st, ibv_wc_opcode op) {
    ibv_wc wc{};
    wc.wr_id = wr_id;
    wc.status = st;
    wc.opcode = op;
    wc.qp_num = q->qp.qp_num;
    return wc;
}

// The requester saw no ACK through every retry: the oldest unACKed WR
// fails, the rest flush.
void retry_exceeded(uint32_t qpn, uint64_t seq) {
    Qp *q = qp_of(qpn);
    if (!q || q->acked > seq || q->qp.state == IBV_QPS_ERR)
        return;
    q->qp.state = IBV_QPS_ERR;
    bool first = true;
    for (auto &[s, w] : q->inflight) {
        push_cqe(
            q->qp.send_cq,
            wc_for(q, w.first, first ? IBV_WC_RETRY_EXC_ERR : IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND), s);
        first = false;
    }
    q->inflight.clear();
    for (auto &r : q->rq)
        push_cqe(q->qp.recv_cq, wc_for(q, r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV), ~0ull);
    q->rq.clear();
    q->rq_sge.clear();
}

void no_ack_for(Qp *src, uint64_t seq) {
    // 4.096 us * 2^timeout per try, 1 + retry_cnt tries
    auto t = std::chrono::nanoseconds(int64_t(4096) << src->timeout) * (1 + src->retry_cnt);
    uint32_t qpn = src->qp.qp_num;
    W().at(std::min<Clock::duration>(t, std::chrono::seconds(2)),
           [qpn, seq] { retry_exceeded(qpn, seq); });
}

// ACKs are cumulative: everything up to seq is done.
void ack(uint32_t qpn, uint64_t seq) {
    Qp *q = qp_of(qpn);
    if (!q || q->qp.state == IBV_QPS_ERR)
        return;
    while (!q->inflight.empty() && q->inflight.begin()->first <= seq) {
        auto [s, w] = *q->inflight.begin();
        if (w.second)
            push_cqe(q->qp.send_cq, wc_for(q, w.first, IBV_WC_SUCCESS, IBV_WC_SEND), s);
        q->inflight.erase(q->inflight.begin());
    }
    q->acked = std::max(q->acked, seq + 1);
}

// The responder takes m into its next receive WR.
void take(Qp *dst, Msg &m) {
    Qp *src = qp_of(m.src);
    ibv_recv_wr r = dst->rq.front();
    ibv_sge sge = dst->rq_sge.front();
    dst->rq.pop_front();
    dst->rq_sge.pop_front();
    if (m.psn != dst->rq_psn)
        W().error(fmt::format("QP 0x{:x} got PSN 0x{:06x} from 0x{:x}, expected 0x{:06x}",
                              dst->qp.qp_num, m.psn, m.src, dst->rq_psn));
    dst->rq_psn = (dst->rq_psn + packets(m.data.size(), dst->mtu)) & 0xFFFFFF;
    if (m.data.size() > (r.num_sge ? sge.length : 0)) {
        push_cqe(dst->qp.recv_cq, wc_for(dst, r.wr_id, IBV_WC_LOC_LEN_ERR, IBV_WC_RECV), ~0ull);
        dst->qp.state = IBV_QPS_ERR;
        if (src) {
            auto it = src->inflight.find(m.seq);
            if (it != src->inflight.end())
                push_cqe(src->qp.send_cq,
                         wc_for(src, it->second.first, IBV_WC_REM_INV_REQ_ERR, IBV_WC_SEND), m.seq);
            src->qp.state = IBV_QPS_ERR;
        }
        return;
    }
    if (!m.data.empty())
        std::memcpy(reinterpret_cast<void *>(sge.addr), m.data.data(), m.data.size());
    ibv_wc wc = wc_for(dst, r.wr_id, IBV_WC_SUCCESS, IBV_WC_RECV);
    wc.byte_len = uint32_t(m.data.size());
    wc.imm_data = m.imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.src_qp = m.src;
    push_cqe(dst->qp.recv_cq, wc, ~0ull);
    if (!src)
        return;
    if (W().no_ack.count(dst->qp.qp_num)) {
        no_ack_for(src, m.seq);
        return;
    }
    uint32_t sq = m.src;
    uint64_t seq = m.seq;
    W().at(W().delay, [sq, seq] { ack(sq, seq); });
}

void deliver(Msg m) {
    Qp *dst = qp_of(m.dst);
    Qp *src = qp_of(m.src);
    if (!dst || dst->qp.state < IBV_QPS_RTR || dst->qp.state == IBV_QPS_ERR || dst->dest != m.src) {
        if (src)
            no_ack_for(src, m.seq); // nobody answers
        return;
    }
    if (dst->rq.empty()) {
        dst->parked.push_back(std::move(m));
        return;
    }
    take(dst, m);
}

int op_post_send(ibv_qp *qp, ibv_send_wr *wr, ibv_send_wr **bad) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (qp->state == IBV_QPS_ERR) { // accepted and flushed, as mlx5 and rxe do
            push_cqe(qp->send_cq, wc_for(q, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_SEND),
                     q->posted++);
            continue;
        }
        if (qp->state != IBV_QPS_RTS)
            return EINVAL;
        if (q->posted - q->freed >= q->cap.max_send_wr) {
            W().error(fmt::format("send queue overflow on QP 0x{:x}: {} WRs not freed", qp->qp_num,
                                  q->posted - q->freed));
            return ENOMEM;
        }
        if (wr->opcode != IBV_WR_SEND_WITH_IMM || wr->num_sge > 1 ||
            (wr->num_sge && !sge_ok(wr->sg_list[0]))) {
            W().error("bad send WR (opcode, SGE count or SGE outside its MR)");
            return EINVAL;
        }
        Msg m;
        m.src = qp->qp_num;
        m.dst = q->dest;
        m.psn = q->sq_psn;
        m.imm = wr->imm_data;
        m.seq = q->posted++;
        if (wr->num_sge) {
            auto *p = reinterpret_cast<const std::byte *>(wr->sg_list[0].addr);
            m.data.assign(p, p + wr->sg_list[0].length);
        }
        q->inflight[m.seq] = {wr->wr_id, (wr->send_flags & IBV_SEND_SIGNALED) != 0};
        q->sent_psns.push_back(q->sq_psn);
        q->sq_psn = (q->sq_psn + packets(m.data.size(), q->mtu)) & 0xFFFFFF;
        W().at(W().delay, [m = std::move(m)]() mutable { deliver(std::move(m)); });
    }
    *bad = nullptr;
    return 0;
}

int op_post_recv(ibv_qp *qp, ibv_recv_wr *wr, ibv_recv_wr **bad) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    for (; wr; wr = wr->next) {
        *bad = wr;
        if (qp->state == IBV_QPS_RESET || qp->state == IBV_QPS_ERR)
            return EINVAL;
        if (q->rq.size() >= q->cap.max_recv_wr)
            return ENOMEM;
        if (wr->num_sge > 1 || (wr->num_sge && !sge_ok(wr->sg_list[0]))) {
            W().error("bad receive WR (SGE count or SGE outside its MR)");
            return EINVAL;
        }
        q->rq.push_back(*wr);
        q->rq_sge.push_back(wr->num_sge ? wr->sg_list[0] : ibv_sge{});
    }
    *bad = nullptr;
    while (!q->parked.empty() && !q->rq.empty() && qp->state != IBV_QPS_ERR) {
        Msg m = std::move(q->parked.front());
        q->parked.pop_front();
        take(q, m);
    }
    return 0;
}

int op_poll_cq(ibv_cq *c, int n, ibv_wc *wc) {
    std::lock_guard lk(W().mu);
    Cq *cq = reinterpret_cast<Cq *>(c);
    int k = 0;
    for (; k < n && !cq->q.empty(); ++k) {
        auto [w, seq] = cq->q.front();
        cq->q.pop_front();
        wc[k] = w;
        if (seq != ~0ull)
            if (Qp *q = qp_of(w.qp_num))
                q->freed = std::max(q->freed, seq + 1); // the driver frees WQEs up to here
    }
    return k;
}

int op_req_notify_cq(ibv_cq *c, int) {
    std::lock_guard lk(W().mu);
    reinterpret_cast<Cq *>(c)->armed = true;
    return 0;
}

} // namespace

void set_no_ack(uint32_t qpn) {
    std::lock_guard lk(W().mu);
    W().no_ack.insert(qpn);
}

std::vector<uint32_t> sent_psns(uint32_t qpn) {
    std::lock_guard lk(W().mu);
    Qp *q = qp_of(qpn);
    return q ? q->sent_psns : W().psns_of_destroyed[qpn];
}

std::string take_errors() {
    std::lock_guard lk(W().mu);
    return std::exchange(W().errors, std::string());
}

} // namespace fakeverbs

using namespace fakeverbs;

extern "C" {

ibv_device **(ibv_get_device_list)(int *n) {
    static ibv_device dev = [] {
        ibv_device d{};
        std::strcpy(d.name, "fake0");
        d.node_type = IBV_NODE_CA;
        d.transport_type = IBV_TRANSPORT_IB;
        return d;
    }();
    *n = 1;
    return new ibv_device *[2] { &dev, nullptr };
}

void ibv_free_device_list(ibv_device **list) {
    delete[] list;
}

const char *ibv_get_device_name(ibv_device *d) {
    return d->name;
}

// A whole verbs_context, of which the inline verbs look at the ibv_context
// at its end (they step back to the start only when abi_compat says so).
ibv_context *ibv_open_device(ibv_device *d) {
    ibv_context *ctx = &(new verbs_context{})->context;
    ctx->device = d;
    ctx->ops.poll_cq = op_poll_cq;
    ctx->ops.req_notify_cq = op_req_notify_cq;
    ctx->ops.post_send = op_post_send;
    ctx->ops.post_recv = op_post_recv;
    ctx->abi_compat = nullptr; // not extended: ibv_query_port() takes the plain path
    return ctx;
}

int ibv_close_device(ibv_context *ctx) {
    delete reinterpret_cast<verbs_context *>(reinterpret_cast<char *>(ctx) -
                                             offsetof(verbs_context, context));
    return 0;
}

int ibv_query_device(ibv_context *, ibv_device_attr *a) {
    *a = ibv_device_attr{};
    a->phys_port_cnt = 1;
    a->max_qp_wr = 4096;
    a->max_cqe = 65536;
    a->max_sge = 1;
    return 0;
}

// The inline ibv_query_port() hands over a whole ibv_port_attr.
int(ibv_query_port)(ibv_context *, uint8_t port, _compat_ibv_port_attr *compat) {
    if (port != 1)
        return EINVAL;
    auto *a = reinterpret_cast<ibv_port_attr *>(compat);
    a->state = IBV_PORT_ACTIVE;
    a->max_mtu = IBV_MTU_4096;
    a->active_mtu = kActiveMtu;
    a->gid_tbl_len = kGidCount;
    a->link_layer = IBV_LINK_LAYER_ETHERNET;
    return 0;
}

int _ibv_query_gid_ex(ibv_context *, uint32_t port, uint32_t index, ibv_gid_entry *e, uint32_t,
                      size_t) {
    if (port != 1 || index >= kGidCount - 1)
        return ENODATA;
    *e = ibv_gid_entry{};
    e->gid = gid_at(index, &e->gid_type);
    e->gid_index = index;
    e->port_num = port;
    return 0;
}

ibv_pd *ibv_alloc_pd(ibv_context *ctx) {
    return new ibv_pd{ctx, 0};
}
int ibv_dealloc_pd(ibv_pd *pd) {
    delete pd;
    return 0;
}

ibv_comp_channel *ibv_create_comp_channel(ibv_context *ctx) {
    int fds[2];
    if (pipe(fds) != 0)
        return nullptr;
    // The read end is the channel's fd; the write end hides in refcnt.
    return new ibv_comp_channel{ctx, fds[0], fds[1]};
}

int ibv_destroy_comp_channel(ibv_comp_channel *ch) {
    close(ch->fd);
    close(ch->refcnt);
    delete ch;
    return 0;
}

ibv_cq *ibv_create_cq(ibv_context *ctx, int cqe, void *cq_context, ibv_comp_channel *ch, int) {
    auto *cq = new Cq;
    cq->cq.context = ctx;
    cq->cq.channel = ch;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    return &cq->cq;
}

int ibv_destroy_cq(ibv_cq *c) {
    std::lock_guard lk(W().mu);
    Cq *cq = reinterpret_cast<Cq *>(c);
    if (cq->events != cq->acked)
        W().error(fmt::format("ibv_destroy_cq with {} of {} events not acked",
                              cq->events - cq->acked, cq->events));
    delete cq;
    return 0;
}

int ibv_get_cq_event(ibv_comp_channel *ch, ibv_cq **cq, void **cq_context) {
    Cq *c = nullptr;
    if (read(ch->fd, &c, sizeof(c)) != ssize_t(sizeof(c)))
        return -1;
    std::lock_guard lk(W().mu);
    c->events++;
    *cq = &c->cq;
    *cq_context = c->cq.cq_context;
    return 0;
}

void ibv_ack_cq_events(ibv_cq *c, unsigned int n) {
    std::lock_guard lk(W().mu);
    reinterpret_cast<Cq *>(c)->acked += n;
}

ibv_qp *ibv_create_qp(ibv_pd *pd, ibv_qp_init_attr *a) {
    if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq || a->cap.max_send_wr > 4096 ||
        a->cap.max_recv_wr > 4096 || a->cap.max_send_sge > 1 || a->cap.max_recv_sge > 1) {
        errno = EINVAL;
        return nullptr;
    }
    std::lock_guard lk(W().mu);
    auto *q = new Qp;
    q->qp.context = pd->context;
    q->qp.qp_context = a->qp_context;
    q->qp.pd = pd;
    q->qp.send_cq = a->send_cq;
    q->qp.recv_cq = a->recv_cq;
    q->qp.qp_num = W().next_qpn++;
    q->qp.state = IBV_QPS_RESET;
    q->qp.qp_type = IBV_QPT_RC;
    q->cap = a->cap;
    W().qps[q->qp.qp_num] = q;
    return &q->qp;
}

int ibv_destroy_qp(ibv_qp *qp) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    W().psns_of_destroyed[qp->qp_num] = q->sent_psns;
    W().qps.erase(qp->qp_num);
    delete q;
    return 0;
}

int ibv_modify_qp(ibv_qp *qp, ibv_qp_attr *a, int mask) {
    std::lock_guard lk(W().mu);
    Qp *q = reinterpret_cast<Qp *>(qp);
    auto need = [&](int required, const char *what) {
        if ((mask & required) == required)
            return true;
        W().error(
            fmt::format("modify_qp {}: mask 0x{:x} lacks 0x{:x}", what, mask, required & ~mask));
        return false;
    };
    if (!(mask & IBV_QP_STATE))
        return EINVAL;
    if (qp->state == IBV_QPS_RESET && a->qp_state == IBV_QPS_INIT) {
        if (!need(IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT") ||
            a->port_num != 1)
            return EINVAL;
    } else if (qp->state == IBV_QPS_INIT && a->qp_state == IBV_QPS_RTR) {
        if (!need(IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                  "RTR"))
            return EINVAL;
        uint32_t type = 0;
        const ibv_global_route &g = a->ah_attr.grh;
        if (!a->ah_attr.is_global || a->ah_attr.port_num != 1 || g.sgid_index >= kGidCount - 1 ||
            (gid_at(g.sgid_index, &type), type) != IBV_GID_TYPE_ROCE_V2 ||
            a->path_mtu > kActiveMtu || a->dest_qp_num > 0xFFFFFF || a->rq_psn > 0xFFFFFF)
            return EINVAL;
        bool reachable = false; // loopback only: the destination is one of our GIDs
        for (uint32_t i = 0; i < kGidCount - 1; ++i) {
            ibv_gid mine = gid_at(i, &type);
            reachable |= type == IBV_GID_TYPE_ROCE_V2 && std::memcmp(mine.raw, g.dgid.raw, 16) == 0;
        }
        if (!reachable)
            return ENETUNREACH;
        q->dest = a->dest_qp_num;
        q->rq_psn = a->rq_psn;
        q->mtu = a->path_mtu;
    } else if (qp->state == IBV_QPS_RTR && a->qp_state == IBV_QPS_RTS) {
        if (!need(IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC,
                  "RTS") ||
            a->sq_psn > 0xFFFFFF)
            return EINVAL;
        q->sq_psn = a->sq_psn;
        q->timeout = a->timeout;
        q->retry_cnt = a->retry_cnt;
    } else {
        W().error(
            fmt::format("modify_qp: no transition {} -> {}", int(qp->state), int(a->qp_state)));
        return EINVAL;
    }
    qp->state = a->qp_state;
    return 0;
}

ibv_mr *(ibv_reg_mr)(ibv_pd *pd, void *addr, size_t length, int) {
    std::lock_guard lk(W().mu);
    uint32_t key = W().next_key++;
    auto *mr = new ibv_mr{pd->context, pd, addr, length, key, key, key};
    W().mrs.push_back(mr);
    return mr;
}

int ibv_dereg_mr(ibv_mr *mr) {
    std::lock_guard lk(W().mu);
    std::erase(W().mrs, mr);
    delete mr;
    return 0;
}

const char *ibv_wc_status_str(ibv_wc_status s) {
    switch (s) {
    case IBV_WC_SUCCESS:
        return "success";
    case IBV_WC_LOC_LEN_ERR:
        return "local length error";
    case IBV_WC_WR_FLUSH_ERR:
        return "Work Request Flushed Error";
    case IBV_WC_REM_INV_REQ_ERR:
        return "remote invalid request error";
    case IBV_WC_RETRY_EXC_ERR:
        return "transport retry counter exceeded";
    default:
        return "other error";
    }
}

const char *ibv_port_state_str(ibv_port_state s) {
    return s == IBV_PORT_ACTIVE ? "ACTIVE" : "DOWN";
}

} // extern "C"
#endif // INCXDP_VERBS_FAKE
