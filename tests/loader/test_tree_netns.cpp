// SPDX-License-Identifier: BSD-2-Clause
// `incxdp rules apply|clear` and `incxdp topo down` on tree124.yaml brought
// up under a private prefix and pin root: what every switch's maps hold
// (read back with bpftool, as an operator would), that re-applying and
// `job reset` restart the connections and slots, that a taken pool or a
// star job of the same id is handled, that clearing removes everything and
// that `topo down` leaves no pins and no namespaces. Only the maps: the
// RoCE data path is not exercised here. Needs root.
#include "process.h"
#include "../common/interrupt_cleanup.h"

#include <incxdp/maps.h>
#include <incxdp/netns.h>
#include <incxdp/roce.h>
#include <incxdp/topology.h>
#include <incxdp/tree.h>
#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <dirent.h>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace {

using namespace incxdp;
using incxdp::test::CleanupOnInterrupt;
using nlohmann::json;
namespace proc = incxdp::topo::detail;

const std::string kFile = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/tree124.yaml";

bool exists(const std::string &path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

std::vector<std::string> entries(const std::string &dir) {
    std::vector<std::string> out;
    std::unique_ptr<DIR, int (*)(DIR *)> d(::opendir(dir.c_str()), ::closedir);
    if (!d)
        return out;
    while (const dirent *e = ::readdir(d.get()))
        if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
            out.push_back(e->d_name);
    return out;
}

uint32_t be_ip(const std::string &s) {
    return incxdp::util::ipv4_be_or_throw(s, "test address");
}

json mac_json(const topo::Mac &m) {
    json j = json::array();
    for (uint8_t b : m)
        j.push_back(b);
    return j;
}

class TreeRulesNetns : public ::testing::Test {
  protected:
    static inline topo::Topology t_;
    static inline topo::TreePlan plan_;
    static inline std::string prefix_, pin_root_;
    static inline std::optional<CleanupOnInterrupt> on_interrupt_;

    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        t_ = topo::Topology::load_file(kFile);
        plan_ = topo::plan_tree(t_, 1);
        prefix_ = "trn" + std::to_string(getpid()) + "-";
        pin_root_ = "/sys/fs/bpf/incxdp-trn" + std::to_string(getpid());
        on_interrupt_.emplace(take_down);
    }

    static void TearDownTestSuite() { on_interrupt_.reset(); }

    // Engines unloaded, namespaces and our pin root gone.
    static void take_down() {
        cli({"topo", "down", kFile, "--prefix", prefix_, "--pin-root", pin_root_});
        topo::down(t_, prefix_);
        if (exists(pin_root_))
            proc::run({"rm", "-rf", pin_root_});
    }

    // Whatever happened.
    void TearDown() override {
        if (geteuid() != 0)
            return;
        try {
            take_down();
        } catch (const std::exception &e) {
            ADD_FAILURE() << "cleanup: " << e.what();
        }
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: creates network namespaces and attaches XDP";
    }

    static proc::ProcResult cli(std::vector<std::string> args) {
        args.insert(args.begin(), INCXDP_CLI);
        return proc::run(args);
    }
    // `incxdp ARGS` inside a node's namespace.
    static proc::ProcResult cli_in(const std::string &node, std::vector<std::string> args) {
        args.insert(args.begin(), INCXDP_CLI);
        args.insert(args.begin(), "--net=/var/run/netns/" + topo::netns_name(prefix_, node));
        args.insert(args.begin(), "nsenter");
        return proc::run(args);
    }
    static std::string ns(const std::string &node) { return topo::netns_name(prefix_, node); }
    static std::string pin_dir(const std::string &sw) {
        return topo::switch_pin_dir(pin_root_, prefix_, sw);
    }
    static std::vector<std::string> rules_args(const std::string &verb,
                                               std::vector<std::string> more = {}) {
        std::vector<std::string> a = {"rules", verb,         kFile,    "--prefix",
                                      prefix_, "--pin-root", pin_root_};
        a.insert(a.end(), more.begin(), more.end());
        return a;
    }

    static json bpftool(std::vector<std::string> args) {
        args.insert(args.begin(), "-j");
        args.insert(args.begin(), "bpftool");
        const auto r = proc::run(args);
        EXPECT_EQ(r.status, 0) << proc::join_argv(args) << ": " << r.err;
        return r.status == 0 ? json::parse(r.out) : json::array();
    }
    // incxdp_roce_conns of a switch: QPN -> the named fields.
    static std::map<uint32_t, json> conns(const std::string &sw) {
        std::map<uint32_t, json> out;
        for (const auto &e : bpftool({"map", "dump", "pinned", pin_dir(sw) + "/incxdp_roce_conns"}))
            out[e.at("formatted").at("key").at("qpn").get<uint32_t>()] =
                e.at("formatted").at("value");
        return out;
    }
    // incxdp_egress entries of job 1: ifindex -> roce_qpn.
    static std::map<uint32_t, uint32_t> egress(const std::string &sw) {
        std::map<uint32_t, uint32_t> out;
        for (const auto &e : bpftool({"map", "dump", "pinned", pin_dir(sw) + "/incxdp_egress"}))
            if (e.at("formatted").at("key").at("job") == 1)
                out[e.at("formatted").at("key").at("ifindex").get<uint32_t>()] =
                    e.at("formatted").at("value").at("roce_qpn").get<uint32_t>();
        return out;
    }
    static json job_entry(const std::string &sw, uint32_t id = 1) {
        const json j = bpftool({"map", "lookup", "pinned", pin_dir(sw) + "/incxdp_jobs", "key",
                                std::to_string(id), "0", "0", "0"});
        return j.is_object() ? j.at("formatted").at("value") : json();
    }
    // incxdp_parents of a job: its link to the parent switch (ifindex 0 at the root).
    static json parent_entry(const std::string &sw, uint32_t id = 1) {
        const json j = bpftool({"map", "lookup", "pinned", pin_dir(sw) + "/incxdp_parents", "key",
                                std::to_string(id), "0", "0", "0"});
        return j.is_object() ? j.at("formatted").at("value") : json();
    }
    static uint32_t ifindex(const std::string &node, const std::string &iface) {
        const auto out =
            proc::run_ok({"ip", "-n", ns(node), "-j", "link", "show", "dev", iface}, "test query");
        return json::parse(out).at(0).at("ifindex").get<uint32_t>();
    }

    // Every switch holds exactly its rules for job 1.
    static void expect_installed(bool pool_as_planned = true) {
        for (const auto &ts : plan_.switches) {
            SCOPED_TRACE("switch " + ts.name);
            const auto got = conns(ts.name);
            std::map<uint32_t, json> want;
            if (ts.parent_conn) {
                const auto &c = plan_.conns[*ts.parent_conn];
                want[c.child_qpn] = {{"role", INCXDP_ROCE_PARENT},
                                     {"ifindex", ifindex(ts.name, c.child_iface)},
                                     {"peer_mac", mac_json(c.parent_mac)},
                                     {"own_mac", mac_json(c.child_mac)},
                                     {"peer_ip", be_ip(c.parent_ip)},
                                     {"own_ip", be_ip(c.child_ip)},
                                     {"peer_qpn", c.parent_qpn},
                                     {"rx_base", c.down_base},
                                     {"tx_base", c.up_base},
                                     {"udp_sport", htons(c.child_sport)},
                                     {"epsn", c.down_base}};
            }
            std::map<uint32_t, uint32_t> want_egress;
            for (size_t i = 0; i < ts.child_conns.size(); i++) {
                const auto &c = plan_.conns[ts.child_conns[i]];
                want[c.parent_qpn] = {{"role", INCXDP_ROCE_CHILD},
                                      {"strict", c.child_is_switch ? 0 : 1},
                                      {"child", i},
                                      {"ifindex", ifindex(ts.name, c.parent_iface)},
                                      {"peer_mac", mac_json(c.child_mac)},
                                      {"own_mac", mac_json(c.parent_mac)},
                                      {"peer_ip", be_ip(c.child_ip)},
                                      {"own_ip", be_ip(c.parent_ip)},
                                      {"peer_qpn", c.child_qpn},
                                      {"rx_base", c.up_base},
                                      {"tx_base", c.down_base},
                                      {"udp_sport", htons(c.parent_sport)},
                                      {"subtree_ranks", c.subtree_ranks},
                                      {"epsn", c.up_base}};
                want_egress[ifindex(ts.name, c.parent_iface)] = c.parent_qpn;
            }
            ASSERT_EQ(got.size(), want.size());
            for (const auto &[qpn, fields] : want) {
                SCOPED_TRACE(fmt_qpn(qpn));
                ASSERT_TRUE(got.count(qpn));
                const json &v = got.at(qpn);
                EXPECT_EQ(v.at("job"), 1);
                for (const auto &[k, x] : fields.items())
                    EXPECT_EQ(v.at(k), x) << k << " in " << v.dump();
                for (const char *k : {"msn", "imm", "nak_sent", "peer_acked", "peer_resend", "acked_up"})
                    EXPECT_EQ(v.at(k), 0) << k << " in " << v.dump();
            }
            EXPECT_EQ(egress(ts.name), want_egress);

            const json j = job_entry(ts.name);
            EXPECT_EQ(j.at("active"), 1);
            EXPECT_EQ(j.at("kind"), INCXDP_JOB_ROCE_TREE);
            EXPECT_EQ(j.at("nworkers"), ts.child_conns.size());
            EXPECT_EQ(j.at("pool_size"), 2048);
            if (pool_as_planned) {
                EXPECT_EQ(j.at("pool_base"), ts.pool_base);
            }
            EXPECT_EQ(j.at("max_elems"), ROCE_MAX_ELEMS);
            EXPECT_EQ(j.at("switch_ip"), be_ip(t_.node(ts.name).ip));
            const json up = parent_entry(ts.name);
            if (ts.parent_conn) {
                const auto &c = plan_.conns[*ts.parent_conn];
                EXPECT_EQ(up.at("qpn"), c.child_qpn) << up.dump();
                EXPECT_EQ(up.at("ifindex"), ifindex(ts.name, c.child_iface)) << up.dump();
                EXPECT_EQ(up.at("dst_ip"), be_ip(c.parent_ip)) << up.dump();
            } else {
                EXPECT_EQ(up.at("ifindex"), 0) << up.dump();
                EXPECT_EQ(up.at("qpn"), 0) << up.dump();
            }
        }
    }

    static std::string fmt_qpn(uint32_t q) {
        char b[16];
        std::snprintf(b, sizeof(b), "QPN 0x%06x", q);
        return b;
    }

    // What the engine would leave after traffic: receive state advanced and
    // slots in use. Written straight into the pinned maps.
    static void dirty(const std::string &sw) {
        const int cfd = bpf_obj_get((pin_dir(sw) + "/incxdp_roce_conns").c_str());
        ASSERT_GE(cfd, 0) << std::strerror(errno);
        incxdp_roce_conn_key k{}, next{};
        incxdp_roce_conn_key *prev = nullptr;
        std::vector<incxdp_roce_conn_key> keys;
        while (bpf_map_get_next_key(cfd, prev, &next) == 0) {
            keys.push_back(next);
            k = next;
            prev = &k;
        }
        for (auto &key : keys) {
            incxdp_roce_conn v{};
            ASSERT_EQ(bpf_map_lookup_elem(cfd, &key, &v), 0);
            v.epsn = (v.epsn + 1234) & 0xFFFFFF;
            v.msn = 1234;
            v.imm = 0xFFFF0100;
            v.nak_sent = 1;
            v.peer_acked = 77;
            v.peer_resend = 1;
            v.acked_up = 55;
            ASSERT_EQ(bpf_map_update_elem(cfd, &key, &v, BPF_EXIST), 0);
        }
        close(cfd);
        const int sfd = bpf_obj_get((pin_dir(sw) + "/incxdp_slots").c_str());
        ASSERT_GE(sfd, 0);
        auto slot = std::make_unique<incxdp_slot>();
        std::memset(slot.get(), 0, sizeof(*slot));
        slot->set[0].bitmap = 1;
        slot->set[0].remaining = 1;
        slot->vals[0][0] = 42;
        const uint32_t base = job_entry(sw).at("pool_base").get<uint32_t>();
        for (uint32_t i : {base, base + 255})
            ASSERT_EQ(bpf_map_update_elem(sfd, &i, slot.get(), BPF_ANY), 0);
        close(sfd);
    }

    static void expect_clean_slots(const std::string &sw) {
        const uint32_t base = job_entry(sw).at("pool_base").get<uint32_t>();
        const int sfd = bpf_obj_get((pin_dir(sw) + "/incxdp_slots").c_str());
        ASSERT_GE(sfd, 0);
        auto slot = std::make_unique<incxdp_slot>();
        for (uint32_t i : {base, base + 255}) {
            ASSERT_EQ(bpf_map_lookup_elem(sfd, &i, slot.get()), 0);
            EXPECT_EQ(slot->set[0].bitmap, 0u) << sw << " slot " << i;
            EXPECT_EQ(slot->vals[0][0], 0) << sw << " slot " << i;
        }
        close(sfd);
    }
};

TEST_F(TreeRulesNetns, ApplyResetReapplyClearDown) {
    auto r = cli({"topo", "up", kFile, "--prefix", prefix_});
    ASSERT_EQ(r.status, 0) << r.err;

    // Switch-switch links exist like host links; hosts reach only their
    // leaf, by a permanent neighbour entry; XDP only on host ends so far.
    const json st = json::parse(cli({"topo", "status", kFile, "--prefix", prefix_, "-j"}).out);
    EXPECT_EQ(st.at("state"), "up");
    for (const auto &n : st.at("nodes"))
        for (const auto &i : n.at("ifaces")) {
            SCOPED_TRACE(n.at("name").get<std::string>() + " " + i.at("name").get<std::string>());
            EXPECT_EQ(i.at("mac"), i.at("expected_mac"));
            EXPECT_EQ(i.at("mtu"), 3500);
            EXPECT_EQ(i.at("up"), true);
            EXPECT_EQ(i.at("xdp").is_null(), n.at("kind") == "switch");
        }
    for (uint32_t rank = 0; rank < plan_.ranks.size(); rank++) {
        const auto &c = plan_.conn_of_rank(rank);
        SCOPED_TRACE(c.child);
        const json neigh = json::parse(proc::run_ok(
            {"ip", "-n", ns(c.child), "-j", "neigh", "show", "dev", c.child_iface}, "test query"));
        ASSERT_EQ(neigh.size(), 1u) << neigh.dump();
        EXPECT_EQ(neigh[0].value("dst", ""), c.parent_ip);
        EXPECT_EQ(neigh[0].value("lladdr", ""), topo::mac_to_string(c.parent_mac));
        EXPECT_EQ(neigh[0].value("state", json::array()), json::array({"PERMANENT"}));
    }

    // apply: loads the engines (native) and installs the job everywhere.
    r = cli(rules_args("apply", {"-j"}));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    const json applied = json::parse(r.out);
    ASSERT_EQ(applied.size(), 3u);
    for (size_t i = 0; i < 3; i++) {
        EXPECT_EQ(applied[i].at("switch"), plan_.switches[i].name);
        EXPECT_EQ(applied[i].at("loaded_ports").size(),
                  t_.node(plan_.switches[i].name).ifaces.size());
        EXPECT_EQ(applied[i].at("reapplied"), false);
        EXPECT_EQ(applied[i].at("pin_dir"), pin_dir(plan_.switches[i].name));
    }
    expect_installed();
    const json after = json::parse(cli({"topo", "status", kFile, "--prefix", prefix_, "-j"}).out);
    for (const auto &n : after.at("nodes"))
        for (const auto &i : n.at("ifaces"))
            EXPECT_FALSE(i.at("xdp").is_null()) << n.at("name") << " " << i.at("name");

    // status, stats and job list with the per-switch pin directory, from the
    // root namespace and from the switch's.
    for (const auto &ts : plan_.switches) {
        SCOPED_TRACE(ts.name);
        r = cli({"status", "--pin-dir", pin_dir(ts.name), "-j"});
        ASSERT_EQ(r.status, 0) << r.err;
        json s = json::parse(r.out);
        EXPECT_EQ(s.at("loaded"), true);
        EXPECT_EQ(s.at("other_netns"), true);
        EXPECT_EQ(s.at("ports").size(), t_.node(ts.name).ifaces.size());
        EXPECT_EQ(s.at("jobs"), 1);
        r = cli_in(ts.name, {"status", "--pin-dir", pin_dir(ts.name), "-j"});
        ASSERT_EQ(r.status, 0) << r.err;
        s = json::parse(r.out);
        EXPECT_EQ(s.at("other_netns"), false);
        for (const auto &p : s.at("ports"))
            EXPECT_NE(p.at("prog_id"), 0) << p.dump();
        r = cli({"stats", "--pin-dir", pin_dir(ts.name), "-j"});
        ASSERT_EQ(r.status, 0) << r.err;
        EXPECT_TRUE(json::parse(r.out).contains("rx"));
        r = cli_in(ts.name, {"job", "list", "--pin-dir", pin_dir(ts.name), "-j"});
        ASSERT_EQ(r.status, 0) << r.err;
        const json jobs = json::parse(r.out);
        ASSERT_EQ(jobs.size(), 1u);
        EXPECT_EQ(jobs[0].at("kind"), "roce-tree");
        EXPECT_EQ(jobs[0].at("workers"), ts.child_conns.size());
        EXPECT_EQ(jobs[0].at("parent_qpn"),
                  ts.parent_conn ? plan_.conns[*ts.parent_conn].child_qpn : 0u);
    }

    // `job reset` on one switch restarts its connections and slots.
    dirty("s1");
    r = cli_in("s1", {"job", "reset", "1", "--pin-dir", pin_dir("s1")});
    ASSERT_EQ(r.status, 0) << r.err;
    expect_clean_slots("s1");
    expect_installed();

    // Re-apply (a new run of the job) does the same on every switch.
    for (const auto &ts : plan_.switches)
        dirty(ts.name);
    r = cli(rules_args("apply", {"-j"}));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    for (const auto &a : json::parse(r.out)) {
        EXPECT_EQ(a.at("reapplied"), true);
        EXPECT_TRUE(a.at("loaded_ports").empty());
    }
    expect_installed();
    for (const auto &ts : plan_.switches)
        expect_clean_slots(ts.name);

    // A star job holding the planned pool: the tree job takes the next free range.
    r = cli(rules_args("clear"));
    ASSERT_EQ(r.status, 0) << r.err;
    r = cli_in("s1",
               {"job", "add", "--id", "7", "--worker", "0=02:00:00:00:00:07/10.79.0.1:4000@p-h0",
                "--switch-ip", "10.79.0.251", "--slots", "256", "--pin-dir", pin_dir("s1")});
    ASSERT_EQ(r.status, 0) << r.err;
    r = cli(rules_args("apply", {"-j"}));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    for (const auto &a : json::parse(r.out))
        if (a.at("switch") == "s1") {
            EXPECT_EQ(a.at("planned_pool_base"), 0);
            EXPECT_EQ(a.at("pool_base"), 256);
        }
    expect_installed(false);
    EXPECT_EQ(job_entry("s1").at("pool_base"), 256);
    r = cli(rules_args("clear"));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(job_entry("s1", 7).at("active"), 1) << "clear must leave other jobs alone";
    r = cli_in("s1", {"job", "del", "7", "--pin-dir", pin_dir("s1")});
    ASSERT_EQ(r.status, 0) << r.err;

    // A star job with the tree job's id on the last switch: apply stops
    // there, names it and what was already done, and s2 stays as it was.
    r = cli_in("s2",
               {"job", "add", "--id", "1", "--worker", "0=02:00:00:00:00:01/10.79.0.3:4000@p-h2",
                "--switch-ip", "10.79.0.252", "--pin-dir", pin_dir("s2")});
    ASSERT_EQ(r.status, 0) << r.err;
    r = cli(rules_args("apply"));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("rules apply: job 1 on switch s2 (namespace " + ns("s2")),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("job 1 is installed here as a star job"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("already applied: job 1 on s0, job 1 on s1"), std::string::npos) << r.err;
    EXPECT_TRUE(conns("s2").empty());
    EXPECT_EQ(job_entry("s2").at("kind"), INCXDP_JOB_STAR);
    r = cli_in("s2", {"job", "del", "1", "--pin-dir", pin_dir("s2")});
    ASSERT_EQ(r.status, 0) << r.err;
    r = cli(rules_args("apply"));
    ASSERT_EQ(r.status, 0) << r.err;
    expect_installed();

    // clear: nothing of job 1 is left on any switch; the engines stay.
    r = cli(rules_args("clear", {"-j"}));
    ASSERT_EQ(r.status, 0) << r.err;
    for (const auto &c : json::parse(r.out)) {
        EXPECT_EQ(c.at("job_found"), true);
        EXPECT_EQ(c.at("engine"), true);
    }
    for (const auto &ts : plan_.switches) {
        SCOPED_TRACE(ts.name);
        EXPECT_TRUE(conns(ts.name).empty());
        EXPECT_TRUE(egress(ts.name).empty());
        EXPECT_EQ(job_entry(ts.name).at("active"), 0);
        EXPECT_EQ(parent_entry(ts.name).at("ifindex"), 0);
        EXPECT_EQ(parent_entry(ts.name).at("qpn"), 0);
        EXPECT_TRUE(exists(pin_dir(ts.name) + "/incxdp_ports"));
    }

    // down: engines unloaded first, so no pin outlives the namespaces.
    r = cli(rules_args("apply"));
    ASSERT_EQ(r.status, 0) << r.err;
    r = cli({"topo", "down", kFile, "--prefix", prefix_, "--pin-root", pin_root_, "-j"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json down = json::parse(r.out);
    EXPECT_EQ(down.at("removed"), t_.nodes.size());
    EXPECT_EQ(down.at("unloaded"), json({"s0", "s1", "s2"}));
    EXPECT_TRUE(entries(pin_root_).empty()) << "left behind: " << json(entries(pin_root_)).dump();
    for (const auto &n : t_.nodes)
        EXPECT_FALSE(exists("/var/run/netns/" + ns(n.name))) << n.name;
}

// A host whose QP is an RDMA device's learns its QPN only when it creates
// the QP (Carrier::Verbs): `rules set-qpn` puts it where that host's
// leaf addresses it, and changes nothing else.
TEST_F(TreeRulesNetns, SetQpnTellsTheLeafTheQpnADeviceAssigned) {
    auto r = cli({"topo", "up", kFile, "--prefix", prefix_});
    ASSERT_EQ(r.status, 0) << r.err;
    r = cli(rules_args("set-qpn", {"--job", "1", "--rank", "2", "--qpn", "0x1234"}));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("apply the job first"), std::string::npos) << r.err;
    r = cli(rules_args("apply"));
    ASSERT_EQ(r.status, 0) << r.err;

    const topo::RoceConn &c = plan_.conn_of_rank(2);
    const auto before = conns(c.parent);
    r = cli(rules_args("set-qpn", {"--job", "1", "--rank", "2", "--qpn", "0x1234", "-j"}));
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    EXPECT_EQ(j.at("switch"), c.parent);
    EXPECT_EQ(j.at("host"), c.child);
    EXPECT_EQ(j.at("switch_qpn"), c.parent_qpn);
    EXPECT_EQ(j.at("old_qpn"), c.child_qpn);
    EXPECT_EQ(j.at("qpn"), 0x1234);
    const auto after = conns(c.parent);
    ASSERT_EQ(after.size(), before.size());
    for (const auto &[qpn, v] : before) {
        json want = v;
        if (qpn == c.parent_qpn) {
            want["peer_qpn"] = 0x1234;
            want["rc_device"] = 1; // its SENDs are ACKed as far as it has their results
        }
        EXPECT_EQ(after.at(qpn), want) << "connection QPN " << qpn;
    }

    r = cli(rules_args("set-qpn", {"--job", "1", "--rank", "2", "--qpn", "0x1000000"}));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("not in 1..0xffffff"), std::string::npos) << r.err;
    r = cli(rules_args("set-qpn", {"--job", "1", "--rank", "9", "--qpn", "5"}));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("no rank 9"), std::string::npos) << r.err;
    // A new run of the job (apply) starts from the topology's QPN again.
    r = cli(rules_args("apply"));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(conns(c.parent).at(c.parent_qpn).at("peer_qpn"), c.child_qpn);
    EXPECT_EQ(conns(c.parent).at(c.parent_qpn).at("rc_device"), 0);
}

TEST_F(TreeRulesNetns, ClearUnloadRemovesTheEngines) {
    auto r = cli({"topo", "up", kFile, "--prefix", prefix_});
    ASSERT_EQ(r.status, 0) << r.err;
    r = cli(rules_args("apply", {"--mode", "skb"}));
    ASSERT_EQ(r.status, 0) << r.err;
    r = cli_in("s0", {"status", "--pin-dir", pin_dir("s0"), "-j"});
    ASSERT_EQ(r.status, 0) << r.err;
    for (const auto &p : json::parse(r.out).at("ports"))
        EXPECT_NE(p.at("mode").get<std::string>().find("skb"), std::string::npos) << p.dump();
    r = cli(rules_args("clear", {"--unload", "-j"}));
    ASSERT_EQ(r.status, 0) << r.err;
    for (const auto &c : json::parse(r.out))
        EXPECT_EQ(c.at("unloaded"), true) << c.dump();
    EXPECT_TRUE(entries(pin_root_).empty()) << json(entries(pin_root_)).dump();
    r = cli({"topo", "down", kFile, "--prefix", prefix_, "--pin-root", pin_root_, "-j"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_TRUE(json::parse(r.out).at("unloaded").empty());
}

// `incxdp status` says which ports transmit what XDP redirects to them
// (a veth only while its peer runs native XDP): every port of a native tree
// does, and a host whose program is gone leaves its leaf's port unable to
// deliver, which status names.
TEST_F(TreeRulesNetns, StatusTellsWhichPortsTransmitXdpFrames) {
    auto r = cli({"topo", "up", kFile, "--prefix", prefix_});
    ASSERT_EQ(r.status, 0) << r.err;
    r = cli(rules_args("apply"));
    ASSERT_EQ(r.status, 0) << r.out << r.err;
    const auto &c = plan_.conn_of_rank(0);
    auto port_xmit = [&](const json &st) {
        std::map<std::string, json> out;
        for (const auto &p : st.at("ports"))
            out[p.at("iface").get<std::string>()] = p.at("xdp_xmit");
        return out;
    };
    for (const auto &ts : plan_.switches) {
        r = cli_in(ts.name, {"status", "--pin-dir", pin_dir(ts.name), "-j"});
        ASSERT_EQ(r.status, 0) << r.err;
        for (const auto &[iface, x] : port_xmit(json::parse(r.out)))
            EXPECT_EQ(x, true) << ts.name << " " << iface;
        r = cli_in(ts.name, {"status", "--pin-dir", pin_dir(ts.name)});
        EXPECT_EQ(r.out.find("warning"), std::string::npos) << r.out;
    }

    proc::run_ok({"ip", "-n", ns(c.child), "link", "set", "dev", c.child_iface, "xdp", "off"}, "detach");
    r = cli_in(c.parent, {"status", "--pin-dir", pin_dir(c.parent), "-j"});
    ASSERT_EQ(r.status, 0) << r.err;
    auto x = port_xmit(json::parse(r.out));
    EXPECT_EQ(x.at(c.parent_iface), false);
    for (const auto &[iface, v] : x)
        EXPECT_EQ(v, iface != c.parent_iface) << iface;
    r = cli_in(c.parent, {"status", "--pin-dir", pin_dir(c.parent)});
    EXPECT_NE(r.out.find("warning: " + c.parent_iface + " transmits no XDP frames"), std::string::npos) << r.out;
}

TEST_F(TreeRulesNetns, ApplyWithoutTheTopologyNamesTheNamespace) {
    const auto r = cli(rules_args("apply"));
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("rules apply: job 1 on switch s0 (namespace " + ns("s0")),
              std::string::npos)
        << r.err;
    EXPECT_NE(r.err.find("does not exist (is the topology up with this prefix?)"),
              std::string::npos)
        << r.err;
}

TEST_F(TreeRulesNetns, ShowPrintsThePlanWithoutAKernel) {
    auto r = cli({"rules", "show", kFile, "--prefix", prefix_, "--pin-root", pin_root_, "-j"});
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    ASSERT_EQ(j.at("jobs").size(), 1u);
    const json &job = j.at("jobs")[0];
    EXPECT_EQ(job.at("ranks"), json({"h0", "h1", "h2", "h3"}));
    EXPECT_EQ(job.at("root"), "s0");
    EXPECT_EQ(job.at("host_order"), "strict");
    ASSERT_EQ(job.at("switches").size(), 3u);
    const json &s1 = job.at("switches")[1];
    EXPECT_EQ(s1.at("name"), "s1");
    EXPECT_EQ(s1.at("pin_dir"), pin_dir("s1"));
    EXPECT_EQ(s1.at("parent").at("peer"), "s0");
    EXPECT_EQ(s1.at("parent").at("qpn"), plan_.conns[*plan_.sw("s1").parent_conn].child_qpn);
    EXPECT_EQ(s1.at("children").size(), 2u);
    EXPECT_EQ(s1.at("multicast").size(), 2u);
    EXPECT_EQ(job.at("conns").size(), plan_.conns.size());
    r = cli({"rules", "show", kFile, "--prefix", prefix_});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_NE(r.out.find("switch s0 (root, 10.79.0.250, namespace " + ns("s0")), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("(roce-tree, root s0, host order strict)"), std::string::npos) << r.out;
    r = cli({"rules", "show", std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/star.yaml"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("has no roce-tree job"), std::string::npos) << r.err;
}

} // namespace
