// SPDX-License-Identifier: BSD-2-Clause
// `incxdp replay` on four hosts behind one switch namespace whose ports are
// bridged (so hosts reach each other): a ring AllReduce, the dedicated-pod
// AllReduce without and with INC tokens (host aggregation, values checked by
// the replay), the plan generator's flawed joins in lenient mode, and what
// it refuses. Every flow must complete with every byte verified; trigger
// order is checked from the recorded times (a triggered flow never starts
// before its trigger fired, a trigger never fires before the flows that fire
// it are done), never durations. Needs root.
#include "../common/interrupt_cleanup.h"
#include "process.h"

#include <incxdp/netns.h>
#include <incxdp/topology.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <unistd.h>

namespace {

using namespace incxdp;
using incxdp::test::CleanupOnInterrupt;
using nlohmann::json;
namespace proc = incxdp::topo::detail;

const char *kYaml = "name: cmreplay\n"
                    "subnet: 10.79.0.0/24\n"
                    "switches:\n"
                    "  - {name: sw, ip: 10.79.0.254}\n"
                    "hosts:\n"
                    "  - {name: h0, ip: 10.79.0.1}\n"
                    "  - {name: h1, ip: 10.79.0.2}\n"
                    "  - {name: h2, ip: 10.79.0.3}\n"
                    "  - {name: h3, ip: 10.79.0.4}\n"
                    "links:\n"
                    "  - [h0, sw]\n"
                    "  - [h1, sw]\n"
                    "  - [h2, sw]\n"
                    "  - [h3, sw]\n";

class CmReplay : public ::testing::Test {
  protected:
    static inline topo::Topology t_;
    static inline std::string prefix_, dir_, yaml_, setup_error_;
    static inline std::optional<CleanupOnInterrupt> on_interrupt_;

    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        prefix_ = "cmr" + std::to_string(getpid()) + "-";
        char tmpl[] = "/tmp/incxdp-cmr-XXXXXX";
        dir_ = ::mkdtemp(tmpl);
        yaml_ = dir_ + "/cmreplay.yaml";
        std::ofstream(yaml_) << kYaml;
        try {
            t_ = topo::Topology::load_file(yaml_);
            on_interrupt_.emplace(take_down);
            topo::up(t_, prefix_);
            // A learning bridge over the switch's ports: host-to-host traffic.
            const std::string sw = topo::netns_name(prefix_, "sw");
            proc::run_ok({"ip", "-n", sw, "link", "add", "br0", "type", "bridge"}, "bridge");
            for (const auto &i : t_.node("sw").ifaces)
                proc::run_ok({"ip", "-n", sw, "link", "set", i.name, "master", "br0"}, "enslave");
            proc::run_ok({"ip", "-n", sw, "link", "set", "br0", "up"}, "bridge up");
        } catch (const std::exception &e) {
            setup_error_ = e.what();
        }
    }

    static void take_down() {
        if (!prefix_.empty())
            topo::down(t_, prefix_);
    }

    static void TearDownTestSuite() {
        if (geteuid() != 0)
            return;
        take_down();
        on_interrupt_.reset();
        proc::run({"rm", "-rf", dir_});
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: creates network namespaces";
        ASSERT_EQ(setup_error_, "");
    }

    static proc::ProcResult cli(std::vector<std::string> args) {
        args.insert(args.begin(), INCXDP_CLI);
        return proc::run(args);
    }

    static std::string write(const std::string &name, const std::string &text) {
        const std::string path = dir_ + "/" + name;
        std::ofstream(path) << text;
        return path;
    }

    // `incxdp replay FILE -j`: exit status and the parsed result.
    static std::pair<int, json> replay(const std::string &cm, std::vector<std::string> extra = {}) {
        std::vector<std::string> args = {"replay", cm,   "--topo",    yaml_, "--prefix",
                                         prefix_,  "-j", "--timeout", "60"};
        args.insert(args.end(), extra.begin(), extra.end());
        proc::ProcResult r = cli(args);
        json j = json::parse(r.out, nullptr, false);
        return {r.status, j.is_discarded() ? json{{"stdout", r.out}, {"stderr", r.err}} : j};
    }

    static std::string gen(const std::string &name, std::vector<std::string> args) {
        const std::string path = dir_ + "/" + name;
        args.insert(args.begin(), {"cm", "gen"});
        args.insert(args.end(), {"-o", path});
        proc::ProcResult r = cli(args);
        EXPECT_EQ(r.status, 0) << r.err;
        return path;
    }
};

// Every flow done and verified; every start, completion and firing in an
// order the triggers allow.
void check_replay(const json &r) {
    ASSERT_TRUE(r.value("ok", false)) << r.dump(1);
    EXPECT_FALSE(r["aggregated"].get<bool>());
    std::map<uint32_t, json> flows;
    uint64_t total = 0;
    for (const json &f : r["flows"]) {
        flows[f["id"].get<uint32_t>()] = f;
        EXPECT_EQ(f["state"], "done") << f.dump();
        EXPECT_TRUE(f["verified"].get<bool>()) << f.dump();
        EXPECT_EQ(f["received"], f["size"]);
        EXPECT_LE(f["released_s"].get<double>(), f["start_s"].get<double>());
        EXPECT_LE(f["start_s"].get<double>(), f["recv_done_s"].get<double>());
        EXPECT_LE(f["recv_done_s"].get<double>(), f["send_done_s"].get<double>());
        total += f["size"].get<uint64_t>();
    }
    EXPECT_EQ(r["total_bytes"].get<uint64_t>(), total);
    EXPECT_EQ(r["flows_done"], r["flows_total"]);
    for (const json &t : r["triggers"]) {
        const auto firings = t["firings_s"].get<std::vector<double>>();
        const uint32_t id = t["id"];
        // Flows waiting on it start after the firing that releases them.
        std::vector<const json *> waiting;
        for (const auto &[fid, f] : flows)
            if (f.contains("trigger") && f["trigger"] == id)
                waiting.push_back(&f);
        for (size_t n = 0; n < waiting.size(); ++n) {
            const double start = (*waiting[n])["released_s"].get<double>();
            size_t firing = 0;
            if (t["kind"] == "barrier")
                firing = t["count"].get<size_t>() - 1;
            else if (t["kind"] == "multishot")
                firing = n;
            ASSERT_GT(firings.size(), firing) << t.dump();
            EXPECT_GE(start, firings[firing]) << "flow " << (*waiting[n])["id"] << t.dump();
        }
    }
}

// Adds each flow's trigger ids from the matrix (the result only has times).
json with_triggers(json r, const std::string &cm) {
    std::ifstream in(cm);
    std::map<uint32_t, std::pair<std::optional<uint32_t>, std::optional<uint32_t>>> t;
    for (std::string line; std::getline(in, line);) {
        std::istringstream ss(line);
        std::vector<std::string> tok;
        for (std::string s; ss >> s;)
            tok.push_back(s);
        if (tok.empty() || tok[0].find("->") == std::string::npos)
            continue;
        uint32_t id = 0;
        std::optional<uint32_t> trig, sd;
        for (size_t i = 1; i + 1 < tok.size(); ++i) {
            if (tok[i] == "id")
                id = std::stoul(tok[i + 1]);
            if (tok[i] == "trigger")
                trig = std::stoul(tok[i + 1]);
            if (tok[i] == "send_done_trigger")
                sd = std::stoul(tok[i + 1]);
        }
        t[id] = {trig, sd};
    }
    std::map<uint32_t, std::vector<double>> done_by_trigger;
    for (json &f : r["flows"]) {
        auto [trig, sd] = t.at(f["id"].get<uint32_t>());
        if (trig)
            f["trigger"] = *trig;
        if (sd) {
            f["send_done_trigger"] = *sd;
            done_by_trigger[*sd].push_back(f["send_done_s"].get<double>());
        }
    }
    // The i-th firing of a trigger comes no earlier than the i-th of its
    // firers to finish.
    for (const json &tr : r["triggers"]) {
        auto firings = tr["firings_s"].get<std::vector<double>>();
        auto done = done_by_trigger[tr["id"].get<uint32_t>()];
        std::sort(done.begin(), done.end());
        EXPECT_EQ(firings.size(), done.size()) << tr.dump();
        for (size_t i = 0; i < std::min(firings.size(), done.size()); ++i)
            EXPECT_GE(firings[i], done[i]) << tr.dump();
    }
    return r;
}

// DOWN flows of a key start only after every UP flow of it reached the
// aggregator (host aggregation's data dependency).
std::tuple<int, int, int, int> key(const json &s, const json &host) {
    return {s["fid"].get<int>(), s["rid"].get<int>(), s["cid"].get<int>(), host.get<int>()};
}

void check_down_after_up(const json &r) {
    std::map<std::tuple<int, int, int, int>, double> last_up;
    for (const json &f : r["flows"]) {
        const json &s = f["semantics"];
        if (s["agg_dir"] != "UP")
            continue;
        auto &t = last_up[key(s, f["dst"])];
        t = std::max(t, f["recv_done_s"].get<double>());
    }
    size_t downs = 0;
    for (const json &f : r["flows"]) {
        const json &s = f["semantics"];
        if (s["agg_dir"] != "DOWN")
            continue;
        ++downs;
        EXPECT_GE(f["start_s"].get<double>(), last_up.at(key(s, f["src"]))) << f.dump();
    }
    EXPECT_GT(downs, 0u);
}

TEST_F(CmReplay, Ring) {
    const std::string cm = gen("ring.cm", {"allreduce-ring", "--nodes", "4", "--size", "4194304"});
    auto [status, r] = replay(cm);
    ASSERT_EQ(status, 0) << r.dump(1);
    r = with_triggers(r, cm);
    check_replay(r);
    EXPECT_EQ(r["flows_total"], 24);
    EXPECT_EQ(r["total_bytes"], 24u << 20);
    EXPECT_EQ(r["inc_flows"], 0);
    EXPECT_EQ(r["aggregation"], "none");
    // Each byte crosses its sender's link up and its receiver's link down.
    ASSERT_EQ(r["links"].size(), 4u);
    EXPECT_GE(r["tiers"]["host-sw"].get<uint64_t>(), 2 * (24u << 20));
    for (const json &l : r["links"])
        EXPECT_GE(l["a_to_b"].get<uint64_t>(), 6u << 20) << l.dump();
}

TEST_F(CmReplay, AllreduceNoInc) {
    const std::string cm = gen("noinc.cm", {"allreduce-inc", "--k", "4", "--hosts", "4",
                                            "--aggregators", "2", "--size", "262144", "--chunks",
                                            "4", "--iterations", "2", "--window", "2", "--no-inc"});
    proc::ProcResult chk = cli({"cm", "check", cm, "-j"});
    ASSERT_EQ(chk.status, 0) << chk.err;
    const json c = json::parse(chk.out);
    EXPECT_EQ(c["flows"], 2 * 4 * 2 * 3);
    EXPECT_EQ(c["triggers_by_kind"]["barrier"], c["triggers"]);
    auto [status, r] = replay(cm);
    ASSERT_EQ(status, 0) << r.dump(1);
    r = with_triggers(r, cm);
    check_replay(r);
    EXPECT_EQ(r["flows_total"], 48);
    EXPECT_EQ(r["inc_flows"], 0);
}

TEST_F(CmReplay, AllreduceIncHostAggregation) {
    for (const char *op : {"SUM", "MAX"}) {
        const std::string cm = gen(std::string("inc") + op + ".cm",
                                   {"allreduce-inc", "--k", "4", "--hosts", "4", "--aggregators",
                                    "2", "--size", "131072", "--chunks", "3", "--iterations", "2",
                                    "--window", "1", "--fid", "5", "--op", op});
        auto [status, r] = replay(cm);
        ASSERT_EQ(status, 0) << r.dump(1);
        r = with_triggers(r, cm);
        check_replay(r);
        check_down_after_up(r);
        EXPECT_EQ(r["inc_flows"], r["flows_total"]);
        EXPECT_EQ(r["aggregation"], "host");
        EXPECT_EQ(r["up_bytes"].get<uint64_t>() + r["down_bytes"].get<uint64_t>(),
                  r["total_bytes"].get<uint64_t>());
        EXPECT_EQ(r["up_bytes"], r["down_bytes"]);
    }
}

// The plan's generator (docs/CM.md §2): DOWN flows wait on the last UP
// flow's oneshot only, oneshots nobody waits on, comments mid-file.
TEST_F(CmReplay, PlanGeneratorFlawsLenient) {
    std::string text = "Nodes 4\nConnections 6\nTriggers 6\n# --- ITERATION 1 ---\n";
    for (int h = 1; h <= 3; ++h)
        text += std::to_string(h) + "->0 id " + std::to_string(h) +
                " start 0 size 1048576 semantics agg_op SUM agg_dir UP fid 1 rid 1 cid 0 "
                "send_done_trigger " +
                std::to_string(h + 1) + "\n";
    for (int h = 1; h <= 3; ++h)
        text += "0->" + std::to_string(h) + " id " + std::to_string(h + 3) +
                " trigger 4 size 1048576 semantics agg_op SUM agg_dir DOWN fid 1 rid 1 cid 0 "
                "send_done_trigger " +
                std::to_string(h + 4) + "\n";
    for (int t = 2; t <= 7; ++t)
        text += "trigger id " + std::to_string(t) + " oneshot\n";
    const std::string cm = write("plan.cm", text);
    EXPECT_NE(replay(cm).first, 0); // strict: the oneshots without waiters
    auto [status, r] = replay(cm, {"--lenient"});
    ASSERT_EQ(status, 0) << r.dump(1);
    check_replay(with_triggers(r, cm));
    check_down_after_up(r);
    for (const json &t : r["triggers"])
        if (t["id"] != 4) {
            EXPECT_EQ(t["ignored"], 1) << t.dump(); // fired, nobody waiting
        }
}

TEST_F(CmReplay, Refusals) {
    // A host the topology does not have.
    auto [s1, r1] = replay(write("far.cm", "Nodes 8\n0->7 id 1 start 0 size 10\n"));
    EXPECT_NE(s1, 0);
    EXPECT_NE(r1.dump().find("topology 'cmreplay' has 4 hosts"), std::string::npos) << r1.dump();
    // A flow whose barrier never completes: reported, not waited for.
    auto [s2, r2] = replay(write("stuck.cm", "Nodes 4\n0->1 id 1 start 0 size 1000 "
                                             "send_done_trigger 1\n1->2 id 2 trigger 1 size 10\n"
                                             "trigger id 1 barrier count 2\n"));
    EXPECT_NE(s2, 0);
    ASSERT_TRUE(r2.contains("flows")) << r2.dump();
    EXPECT_FALSE(r2["ok"].get<bool>());
    EXPECT_EQ(r2["flows"][0]["state"], "done");
    EXPECT_EQ(r2["flows"][1]["state"], "waiting");
    EXPECT_EQ(r2["triggers"][0]["firings_s"].size(), 1u);
}

// Failure lines are refused (links are not failed), naming the line;
// --ignore-failures runs the flows with every link up.
TEST_F(CmReplay, FailureLinesRefusedUnlessIgnored) {
    const std::string cm = write("fail.cm", "Nodes 4\nConnections 1\nFailures 1\n"
                                            "0->1 id 1 start 0 size 1000\n"
                                            "failure switch_type TOR switch_id 0 link_id 1\n");
    auto [s1, r1] = replay(cm);
    EXPECT_NE(s1, 0);
    EXPECT_NE(r1.dump().find("line 5: failure switch_type TOR switch_id 0 link_id 1"),
              std::string::npos)
        << r1.dump();
    EXPECT_NE(r1.dump().find("--ignore-failures"), std::string::npos) << r1.dump();
    auto [s2, r2] = replay(cm, {"--ignore-failures"});
    EXPECT_EQ(s2, 0) << r2.dump();
    ASSERT_TRUE(r2.contains("flows")) << r2.dump();
    EXPECT_EQ(r2["flows"][0]["state"], "done");
}

// --inc switch refuses a fid whose (rid, cid) keys do not all have the
// same members, before anything starts (the switches run one allreduce
// per key over every member).
TEST_F(CmReplay, SwitchPathRefusesPartialKeys) {
    const std::string cm =
        write("partial.cm",
              "Nodes 4\n"
              "1->0 id 1 start 0 size 64 semantics agg_op SUM agg_dir UP fid 1 rid 1 cid 0\n"
              "2->0 id 2 start 0 size 64 semantics agg_op SUM agg_dir UP fid 1 rid 1 cid 0\n"
              "1->0 id 3 start 0 size 64 semantics agg_op SUM agg_dir UP fid 1 rid 1 cid 1\n");
    auto [s, r] = replay(cm, {"--inc", "switch", "--pin-root", dir_ + "/nopins"});
    EXPECT_NE(s, 0);
    EXPECT_NE(r.dump().find("fid 1 rid 1 cid 1: 2 contributors"), std::string::npos) << r.dump();
}

} // namespace
