// SPDX-License-Identifier: BSD-2-Clause
// The .cm parser (every token, every error, lenient mode, the files of
// docs/CM.md), the generators (round trips, the INC AllReduce's joins and
// windows, every flow reachable through its triggers) and the payloads that
// replay checks (host aggregation against a direct computation). No kernel.
#include "cm_gen.h"
#include "cm_parse.h"
#include "cm_payload.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <set>

namespace {

using namespace incxdp::cm;

TEST(CmParse, EveryToken) {
    const Matrix m = parse("# a comment in the header\n"
                           "Nodes 8\n"
                           "\n"
                           "Connections 3\n"
                           "Triggers 3\n"
                           "Failures 2\n"
                           "0->7 id 5 start 1.5e6 size 1000 prio 3 send_done_trigger 1 "
                           "recv_done_trigger 2\n"
                           "# mid-file comment\n"
                           "7->0 size 64 id 6 trigger 1 semantics agg_op MAX agg_dir DOWN fid 9 "
                           "rid 2 cid 4\n"
                           "3->4 id 7 recv_done_trigger 3 trigger 2 size 0 semantics cid 1 rid 1 "
                           "fid 1 agg_dir UP agg_op AVG\n"
                           "trigger id 1 oneshot\n"
                           "trigger id 2 multishot\n"
                           "trigger id 3 barrier count 1\n"
                           "failure switch_type CORE switch_id 2 link_id 1\n"
                           "failure link_id 0 switch_id 3 switch_type AGG\n");
    ASSERT_EQ(m.nodes, 8u);
    ASSERT_EQ(m.flows.size(), 3u);
    const Flow &a = m.flows[0];
    EXPECT_EQ(a.src, 0u);
    EXPECT_EQ(a.dst, 7u);
    EXPECT_EQ(a.id, 5u);
    EXPECT_EQ(a.start_ps, 1.5e6);
    EXPECT_FALSE(a.trigger);
    EXPECT_EQ(a.size, 1000u);
    EXPECT_EQ(a.prio, 3);
    EXPECT_EQ(a.send_done, 1u);
    EXPECT_EQ(a.recv_done, 2u);
    EXPECT_FALSE(a.semantics);
    EXPECT_EQ(a.line, 7);
    const Flow &b = m.flows[1];
    EXPECT_EQ(b.trigger, 1u);
    EXPECT_FALSE(b.start_ps);
    ASSERT_TRUE(b.semantics);
    EXPECT_EQ(*b.semantics, (Semantics{AggOp::Max, AggDir::Down, 9, 2, 4}));
    EXPECT_EQ(b.line, 9);
    const Flow &c = m.flows[2];
    EXPECT_EQ(*c.semantics, (Semantics{AggOp::Avg, AggDir::Up, 1, 1, 1}));
    EXPECT_EQ(c.recv_done, 3u);
    EXPECT_EQ(c.size, 0u);
    ASSERT_EQ(m.triggers.size(), 3u);
    EXPECT_EQ(m.triggers[0], (Trigger{1, TriggerKind::Oneshot, 0, 0}));
    EXPECT_EQ(m.triggers[1], (Trigger{2, TriggerKind::Multishot, 0, 0}));
    EXPECT_EQ(m.triggers[2], (Trigger{3, TriggerKind::Barrier, 1, 0}));
    ASSERT_EQ(m.failures.size(), 2u);
    EXPECT_EQ(m.failures[0], (Failure{SwitchType::Core, 2, 1, 0}));
    EXPECT_EQ(m.failures[1], (Failure{SwitchType::Agg, 3, 0, 0}));
    EXPECT_TRUE(m.warnings.empty());
    // Written back in htsim's grammar, it reads the same.
    const Matrix again = parse(to_text(m));
    EXPECT_EQ(again.flows, m.flows);
    EXPECT_EQ(again.triggers, m.triggers);
    EXPECT_EQ(again.failures, m.failures);
    EXPECT_EQ(to_text(again), to_text(m));
}

TEST(CmParse, HeaderIsOptional) {
    const Matrix m = parse("2->5 id 1 start 0 size 10\r\n");
    EXPECT_FALSE(m.nodes);
    EXPECT_EQ(m.node_count(), 6u);
    EXPECT_EQ(m.flows.at(0).dst, 5u);
}

struct ErrorRow {
    const char *name;
    const char *text;
    int line;
    const char *token;
};

const ErrorRow kErrors[] = {
    {"unknown flow token", "Nodes 4\nConnections 1\n0->1 id 1 start 0 size 10 foo 3\n", 3, "foo"},
    {"unknown line", "Nodes 4\nflow 0 1\n", 2, "flow"},
    {"unknown header value", "Nodes 4 extra\n", 1, "extra"},
    {"trigger before id", "Triggers 1\n0->1 trigger 1 id 1 size 10\ntrigger id 1 oneshot\n", 2,
     "trigger"},
    {"start then trigger", "0->1 id 1 start 0 trigger 1 size 10\ntrigger id 1 oneshot\n", 1,
     "trigger"},
    {"trigger then start", "0->1 id 1 trigger 1 start 0 size 10\ntrigger id 1 oneshot\n", 1,
     "start"},
    {"neither start nor trigger", "Nodes 2\n0->1 id 1 size 10\n", 2, "0->1"},
    {"no id", "0->1 start 0 size 10\n", 1, "0->1"},
    {"duplicate flow id", "Nodes 4\n0->1 id 1 start 0 size 1\n1->2 id 1 start 0 size 1\n", 3, "1"},
    {"zero flow id", "0->1 id 0 start 0 size 1\n", 1, "0"},
    {"duplicate key", "0->1 id 1 start 0 size 1 size 2\n", 1, "size"},
    {"connections mismatch", "Nodes 4\nConnections 2\n0->1 id 1 start 0 size 1\n", 2,
     "Connections"},
    {"triggers mismatch",
     "Triggers 2\n0->1 id 1 start 0 size 1 send_done_trigger 1\n1->0 id 2 trigger 1 size 1\n"
     "trigger id 1 oneshot\n",
     1, "Triggers"},
    {"failures mismatch", "Failures 1\n0->1 id 1 start 0 size 1\n", 1, "Failures"},
    {"undeclared trigger (start)", "0->1 id 1 trigger 4 size 1\n", 1, "4"},
    {"undeclared trigger (send_done)", "0->1 id 1 start 0 size 1 send_done_trigger 7\n", 1, "7"},
    {"undeclared trigger (recv_done)", "0->1 id 1 start 0 size 1 recv_done_trigger 8\n", 1, "8"},
    {"barrier without count",
     "0->1 id 1 start 0 size 1 send_done_trigger 1\n1->0 id 2 trigger 1 size 1\n"
     "trigger id 1 barrier\n",
     3, "barrier"},
    {"count on a oneshot", "trigger id 1 oneshot count 2\n", 1, "count"},
    {"unknown trigger kind", "trigger id 1 twoshot\n", 1, "twoshot"},
    {"duplicate trigger id", "trigger id 1 multishot\ntrigger id 1 multishot\n", 2, "1"},
    {"src beyond Nodes", "Nodes 4\n4->1 id 1 start 0 size 1\n", 2, "4->1"},
    {"dst beyond Nodes", "Nodes 4\n\n1->9 id 1 start 0 size 1\n", 3, "1->9"},
    {"malformed endpoints", "1-2 id 1 start 0 size 1\n", 1, "1-2"},
    {"malformed endpoint number", "1->x id 1 start 0 size 1\n", 1, "1->x"},
    {"malformed size", "0->1 id 1 start 0 size 10x\n", 1, "10x"},
    {"malformed id", "0->1 id one start 0 size 10\n", 1, "one"},
    {"malformed start", "0->1 id 1 start 1.5e size 10\n", 1, "1.5e"},
    {"negative start", "0->1 id 1 start -1 size 10\n", 1, "-1"},
    {"missing value", "0->1 id 1 start 0 size\n", 1, "size"},
    {"malformed Nodes", "Nodes four\n", 1, "four"},
    {"header after body", "0->1 id 1 start 0 size 1\nNodes 4\n", 2, "Nodes"},
    {"bad agg_op", "0->1 id 1 start 0 size 4 semantics agg_op FOO agg_dir UP fid 1 rid 1 cid 0\n",
     1, "FOO"},
    {"bad agg_dir",
     "0->1 id 1 start 0 size 4 semantics agg_op SUM agg_dir SIDEWAYS fid 1 rid 1 "
     "cid 0\n",
     1, "SIDEWAYS"},
    {"incomplete semantics", "0->1 id 1 start 0 size 4 semantics agg_op SUM agg_dir UP fid 1\n", 1,
     "semantics"},
    {"bad switch_type", "failure switch_type ROOT switch_id 0 link_id 0\n", 1, "ROOT"},
    {"incomplete failure", "failure switch_type TOR switch_id 0\n", 1, "failure"},
    // The static check of trigger firings (strict mode).
    {"oneshot fired twice",
     "0->1 id 1 start 0 size 1 send_done_trigger 1\n1->2 id 2 start 0 size 1 send_done_trigger 1\n"
     "2->0 id 3 trigger 1 size 1\ntrigger id 1 oneshot\n",
     4, "1"},
    {"oneshot without waiting flow",
     "0->1 id 1 start 0 size 1 send_done_trigger 3\ntrigger id 3 oneshot\n", 2, "3"},
    {"barrier fired beyond its count",
     "0->1 id 1 start 0 size 1 send_done_trigger 2\n1->2 id 2 start 0 size 1 recv_done_trigger "
     "2\n2->0 id 3 trigger 2 size 1\ntrigger id 2 barrier count 1\n",
     4, "2"},
};

class CmErrors : public ::testing::TestWithParam<ErrorRow> {};

TEST_P(CmErrors, NamesLineAndToken) {
    const ErrorRow &row = GetParam();
    try {
        parse(row.text);
        FAIL() << row.name << ": parsed";
    } catch (const CmError &e) {
        EXPECT_EQ(e.line, row.line) << e.what();
        EXPECT_EQ(e.token, row.token) << e.what();
        const std::string what = e.what();
        EXPECT_NE(what.find(fmt::format("line {}:", row.line)), std::string::npos) << what;
        EXPECT_NE(what.find(fmt::format("'{}'", row.token)), std::string::npos) << what;
    }
}

INSTANTIATE_TEST_SUITE_P(Table, CmErrors, ::testing::ValuesIn(kErrors), [](const auto &info) {
    std::string n = info.param.name;
    for (char &c : n)
        if (!isalnum(static_cast<unsigned char>(c)))
            c = '_';
    return n;
});

TEST(CmParse, ErrorQuotesTheLine) {
    try {
        parse("Nodes 4\n0->1 id 1 start 0 size 10 bogus\n");
        FAIL();
    } catch (const CmError &e) {
        EXPECT_STREQ(e.what(),
                     "line 2: unknown token (token 'bogus'): 0->1 id 1 start 0 size 10 bogus");
    }
}

// Each firing flaw alone, and all three together: strict rejects, lenient
// warns, and nothing else is relaxed.
TEST(CmParse, LenientTurnsTriggerFlawsIntoWarnings) {
    const std::string flawed = "Nodes 3\nConnections 5\nTriggers 3\n"
                               "0->1 id 1 start 0 size 1 send_done_trigger 1\n"
                               "1->2 id 2 start 0 size 1 send_done_trigger 1\n"
                               "2->0 id 3 trigger 1 size 1 send_done_trigger 2\n"
                               "0->2 id 4 start 0 size 1 send_done_trigger 3\n"
                               "1->0 id 5 start 0 size 1 recv_done_trigger 3\n"
                               "trigger id 1 oneshot\n"
                               "trigger id 2 oneshot\n"
                               "trigger id 3 barrier count 1\n";
    EXPECT_THROW(parse(flawed), CmError);
    const Matrix m = parse(flawed, {.lenient = true});
    ASSERT_EQ(m.warnings.size(), 3u);
    EXPECT_NE(m.warnings[0].find("oneshot trigger 1 is fired by 2 flows"), std::string::npos);
    EXPECT_NE(m.warnings[1].find("oneshot trigger 2 has no waiting flow"), std::string::npos);
    EXPECT_NE(m.warnings[2].find("barrier 3 is fired by 2 flows but counts 1"), std::string::npos);
    EXPECT_EQ(m.flows.size(), 5u);
    // Lenient is about firings only.
    EXPECT_THROW(parse(flawed + "0->1 id 9 start 0 size 1 foo\n", {.lenient = true}), CmError);
    EXPECT_THROW(parse("Connections 2\n0->1 id 1 start 0 size 1\n", {.lenient = true}), CmError);
    EXPECT_THROW(parse("0->1 id 1 start 0 size 1 send_done_trigger 5\n", {.lenient = true}),
                 CmError);
}

TEST(CmParse, NeverFiredTriggerIsAWarning) {
    const Matrix m = parse("0->1 id 1 trigger 1 size 1\ntrigger id 1 barrier count 2\n");
    ASSERT_EQ(m.warnings.size(), 1u);
    EXPECT_NE(m.warnings[0].find("never start"), std::string::npos);
}

// htsim's perm_16n_16c_2MB.cm (docs/CM.md §1): a permutation, timed flows.
TEST(CmExamples, HtsimPermutation) {
    // A permutation s -> s+14 mod 16, listed from 7->5 as the file is.
    std::string text = "Nodes 16\nConnections 16\n";
    for (uint32_t i = 0; i < 16; ++i) {
        const uint32_t s = (7 + i) % 16;
        text += fmt::format("{}->{} id {} start 0 size 2000000\n", s, (s + 14) % 16, i + 1);
    }
    const Matrix m = parse(text);
    EXPECT_EQ(m.flows.size(), 16u);
    EXPECT_EQ(m.flows[0], (Flow{7, 5, 1, 0.0, {}, 2000000, {}, {}, {}, {}, 0}));
}

// htsim's ring generator output (docs/CM.md §1) is what gen_allreduce_ring
// writes: the example's lines, in its order.
TEST(CmExamples, HtsimRing) {
    const std::string text = to_text(gen_allreduce_ring(4, 4000));
    EXPECT_EQ(text.rfind("Nodes 4\nConnections 24\nTriggers 20\n"
                         "0->1 id 1 start 0 size 1000 send_done_trigger 1\n"
                         "1->2 id 2 trigger 1 size 1000 send_done_trigger 2\n",
                         0),
              0u)
        << text;
    EXPECT_NE(text.find("\ntrigger id 1 oneshot\n"), std::string::npos);
    const Matrix m = parse(text);
    EXPECT_TRUE(m.warnings.empty());
}

// The plan's generator (docs/CM.md §2), as it writes: comments mid-file,
// one oneshot per flow, the DOWN flows waiting on the last UP flow's only.
const char *kPlanInc =
    "Nodes 4\nConnections 6\nTriggers 6\n"
    "# --- ITERATION 1 ---\n"
    "1->0 id 1 start 0 size 1048576 semantics agg_op SUM agg_dir UP fid 1 rid 1 cid 0 "
    "send_done_trigger 2\n"
    "2->0 id 2 start 0 size 1048576 semantics agg_op SUM agg_dir UP fid 1 rid 1 cid 0 "
    "send_done_trigger 3\n"
    "3->0 id 3 start 0 size 1048576 semantics agg_op SUM agg_dir UP fid 1 rid 1 cid 0 "
    "send_done_trigger 4\n"
    "# DOWN\n"
    "0->1 id 4 trigger 4 size 1048576 semantics agg_op SUM agg_dir DOWN fid 1 rid 1 cid 0 "
    "send_done_trigger 5\n"
    "0->2 id 5 trigger 4 size 1048576 semantics agg_op SUM agg_dir DOWN fid 1 rid 1 cid 0 "
    "send_done_trigger 6\n"
    "0->3 id 6 trigger 4 size 1048576 semantics agg_op SUM agg_dir DOWN fid 1 rid 1 cid 0 "
    "send_done_trigger 7\n"
    "trigger id 2 oneshot\ntrigger id 3 oneshot\ntrigger id 4 oneshot\n"
    "trigger id 5 oneshot\ntrigger id 6 oneshot\ntrigger id 7 oneshot\n";

TEST(CmExamples, PlanIncGeneratorNeedsLenient) {
    try {
        parse(kPlanInc);
        FAIL();
    } catch (const CmError &e) {
        EXPECT_EQ(e.token, "2"); // trigger 2: no waiting flow
    }
    const Matrix m = parse(kPlanInc, {.lenient = true});
    EXPECT_EQ(m.flows.size(), 6u);
    EXPECT_EQ(m.warnings.size(), 5u); // triggers 2, 3, 5, 6, 7
    EXPECT_EQ(*m.flows[3].semantics, (Semantics{AggOp::Sum, AggDir::Down, 1, 1, 0}));
}

// Starts flows as replay does (oneshot: all at the first firing; multishot:
// the next; barrier: all at the count-th), completing each in file order;
// returns the flows that never start.
std::set<uint32_t> unreachable(const Matrix &m) {
    std::map<uint32_t, std::vector<const Flow *>> waiting;
    std::map<uint32_t, uint32_t> fired, next;
    std::vector<const Flow *> ready;
    for (const Flow &f : m.flows) {
        if (f.trigger)
            waiting[*f.trigger].push_back(&f);
        else
            ready.push_back(&f);
    }
    std::set<uint32_t> started;
    auto fire = [&](uint32_t id) {
        const Trigger &t = *m.trigger(id);
        const uint32_t n = ++fired[id];
        auto &w = waiting[id];
        if (t.kind == TriggerKind::Oneshot && n == 1)
            ready.insert(ready.end(), w.begin(), w.end());
        if (t.kind == TriggerKind::Barrier && n == t.count)
            ready.insert(ready.end(), w.begin(), w.end());
        if (t.kind == TriggerKind::Multishot && next[id] < w.size())
            ready.push_back(w[next[id]++]);
    };
    while (!ready.empty()) {
        const Flow *f = ready.front();
        ready.erase(ready.begin());
        started.insert(f->id);
        if (f->recv_done)
            fire(*f->recv_done);
        if (f->send_done)
            fire(*f->send_done);
    }
    std::set<uint32_t> out;
    for (const Flow &f : m.flows)
        if (!started.count(f.id))
            out.insert(f.id);
    return out;
}

TEST(CmGen, RingRoundTripAndOrder) {
    const Matrix m = gen_allreduce_ring(5, 5000);
    EXPECT_EQ(m.flows.size(), 5u * 8);
    const Matrix p = parse(to_text(m));
    EXPECT_EQ(p.flows, m.flows);
    EXPECT_EQ(p.triggers, m.triggers);
    EXPECT_TRUE(p.warnings.empty());
    EXPECT_TRUE(unreachable(p).empty());
    // Node i's step s waits for node i-1's step s-1.
    std::map<uint32_t, const Flow *> fired_by;
    for (const Flow &f : p.flows)
        if (f.send_done)
            fired_by[*f.send_done] = &f;
    for (const Flow &f : p.flows) {
        EXPECT_EQ(f.dst, (f.src + 1) % 5);
        EXPECT_EQ(f.size, 1000u);
        if (f.trigger) {
            EXPECT_EQ(fired_by.at(*f.trigger)->dst, f.src);
        }
    }
}

struct IncCase {
    uint32_t k, chunks, iterations, window;
};

class CmGenInc : public ::testing::TestWithParam<IncCase> {};

TEST_P(CmGenInc, JoinsAndWindows) {
    const IncCase c = GetParam();
    AllreduceIncParams p;
    p.k = c.k;
    p.size = 4096;
    p.chunks = c.chunks;
    p.iterations = c.iterations;
    p.window = c.window;
    p.fid = 7;
    const Matrix m = gen_allreduce_inc(p);
    const uint32_t n = c.k * c.k * c.k / 4, aggs = c.k * c.k / 4;
    const uint32_t w = c.window == 0 ? c.chunks : std::min(c.window, c.chunks);
    const std::string text = to_text(m);
    const Matrix q = parse(text); // strict: no flaw
    EXPECT_EQ(q.flows, m.flows);
    EXPECT_EQ(q.triggers, m.triggers);
    EXPECT_TRUE(q.warnings.empty()) << q.warnings.front();
    EXPECT_TRUE(unreachable(q).empty());
    EXPECT_EQ(q.flows.size(), size_t(c.iterations) * c.chunks * 2 * (n - 1));

    using Key = std::pair<uint32_t, uint32_t>; // (rid, cid)
    std::map<Key, std::set<uint32_t>> up, down;
    std::map<uint32_t, std::set<uint32_t>> firers;
    for (const Flow &f : q.flows) {
        ASSERT_TRUE(f.semantics);
        EXPECT_EQ(f.semantics->fid, 7u);
        const Key k{f.semantics->rid, f.semantics->cid};
        const uint32_t agg = f.semantics->cid % aggs;
        if (f.semantics->dir == AggDir::Up) {
            up[k].insert(f.id);
            EXPECT_EQ(f.dst, agg);
        } else {
            down[k].insert(f.id);
            EXPECT_EQ(f.src, agg);
        }
        if (f.send_done)
            firers[*f.send_done].insert(f.id);
        EXPECT_FALSE(f.recv_done);
    }
    ASSERT_EQ(up.size(), size_t(c.iterations) * c.chunks);
    for (const auto &[k, ups] : up) {
        ASSERT_EQ(ups.size(), n - 1);
        ASSERT_EQ(down[k].size(), n - 1);
        // Every DOWN flow of (rid, cid) waits on one barrier of count N-1
        // fired by exactly the UP flows of (rid, cid).
        std::optional<uint32_t> join;
        for (uint32_t id : down[k]) {
            const Flow &f = *q.flow(id);
            ASSERT_TRUE(f.trigger);
            if (join) {
                EXPECT_EQ(*f.trigger, *join);
            }
            join = f.trigger;
        }
        const Trigger &t = *q.trigger(*join);
        EXPECT_EQ(t.kind, TriggerKind::Barrier);
        EXPECT_EQ(t.count, n - 1);
        EXPECT_EQ(firers[*join], ups);
        // The chunk's UP flows start together: at 0, after chunk c-W of the
        // same iteration, or after the previous iteration's last W chunks.
        const auto [rid, cid] = k;
        const Flow &u = *q.flow(*ups.begin());
        for (uint32_t id : ups)
            EXPECT_EQ(q.flow(id)->trigger, u.trigger);
        if (rid == 1 && cid < w) {
            EXPECT_EQ(u.start_ps, 0.0);
            continue;
        }
        ASSERT_TRUE(u.trigger);
        const Trigger &gate = *q.trigger(*u.trigger);
        EXPECT_EQ(gate.kind, TriggerKind::Barrier);
        std::set<uint32_t> want;
        if (cid >= w) {
            want = down[{rid, cid - w}];
        } else {
            for (uint32_t pc = c.chunks - w; pc < c.chunks; ++pc)
                want.insert(down[{rid - 1, pc}].begin(), down[{rid - 1, pc}].end());
        }
        EXPECT_EQ(firers[*u.trigger], want);
        EXPECT_EQ(gate.count, want.size());
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, CmGenInc,
                         ::testing::Values(IncCase{4, 1, 1, 0}, IncCase{4, 4, 2, 0},
                                           IncCase{4, 6, 3, 2}, IncCase{2, 3, 2, 1},
                                           IncCase{6, 2, 1, 5}));

TEST(CmGen, NoIncIsStockHtsim) {
    AllreduceIncParams p;
    p.k = 4;
    p.chunks = 3;
    p.iterations = 2;
    p.window = 2;
    p.inc = false;
    const Matrix inc_m = [&] {
        auto q = p;
        q.inc = true;
        return gen_allreduce_inc(q);
    }();
    const std::string text = to_text(gen_allreduce_inc(p));
    EXPECT_EQ(text.find("semantics"), std::string::npos);
    EXPECT_EQ(text.find('#'), std::string::npos);
    const Matrix m = parse(text);
    ASSERT_EQ(m.flows.size(), inc_m.flows.size());
    for (size_t i = 0; i < m.flows.size(); ++i) {
        Flow f = inc_m.flows[i];
        f.semantics.reset();
        EXPECT_EQ(m.flows[i], f);
    }
}

TEST(CmGen, SmallOverride) {
    AllreduceIncParams p;
    p.hosts = 4;
    p.aggregators = 2;
    p.chunks = 2;
    const Matrix m = parse(to_text(gen_allreduce_inc(p)));
    EXPECT_EQ(m.node_count(), 4u);
    EXPECT_EQ(m.flows.size(), 2u * 2 * 3);
    EXPECT_EQ(m.flows[6].dst, 1u); // chunk 1 at host 1
    p.aggregators = 5;
    EXPECT_THROW(gen_allreduce_inc(p), std::invalid_argument);
}

TEST(CmGen, RejectsBadParameters) {
    AllreduceIncParams p;
    p.k = 3;
    EXPECT_THROW(gen_allreduce_inc(p), std::invalid_argument);
    p.k = 4;
    p.chunks = 0;
    EXPECT_THROW(gen_allreduce_inc(p), std::invalid_argument);
    EXPECT_THROW(gen_allreduce_ring(1, 100), std::invalid_argument);
    EXPECT_THROW(gen_allreduce_ring(8, 4), std::invalid_argument);
}

// What the aggregator's DOWN flows carry equals a direct reduction.
TEST(CmPayload, AggregateMatchesDirectReduction) {
    for (AggOp op : {AggOp::Sum, AggOp::Max, AggOp::Min, AggOp::Avg}) {
        const Semantics key{op, AggDir::Up, 3, 2, 1};
        const uint64_t size = 4 * 100 + 2; // a partial element at the end
        Aggregate folded(0, key, size), expected(0, key, size);
        for (uint32_t h : {1u, 2u, 3u}) {
            std::vector<uint8_t> b(size);
            inc_bytes(h, key, size, 0, b.data(), b.size());
            for (uint64_t i = 0; i < size / 4; ++i) {
                int32_t v;
                std::memcpy(&v, &b[4 * i], 4);
                EXPECT_EQ(v, inc_value(h, key, i));
                folded.add(i, v);
            }
            folded.contribution_done();
            expected.add_host(h);
        }
        const std::string got = folded.bytes();
        EXPECT_EQ(got, expected.bytes());
        for (uint64_t i = 0; i < size / 4; ++i) {
            int64_t acc = inc_value(0, key, i);
            for (uint32_t h : {1u, 2u, 3u}) {
                const int64_t v = inc_value(h, key, i);
                acc = op == AggOp::Max   ? std::max(acc, v)
                      : op == AggOp::Min ? std::min(acc, v)
                                         : acc + v;
            }
            if (op == AggOp::Avg)
                acc /= 4;
            int32_t v;
            std::memcpy(&v, got.data() + 4 * i, 4);
            EXPECT_EQ(v, acc) << agg_op_name(op) << " element " << i;
        }
        EXPECT_EQ(got.substr(size - 2), std::string(2, '\0'));
    }
}

TEST(CmPayload, PatternIsOffsetIndependent) {
    std::vector<uint8_t> whole(1000), part(333);
    pattern_bytes(42, 0, whole.data(), whole.size());
    pattern_bytes(42, 501, part.data(), part.size());
    EXPECT_EQ(0, std::memcmp(whole.data() + 501, part.data(), part.size()));
    std::vector<uint8_t> other(1000);
    pattern_bytes(43, 0, other.data(), other.size());
    EXPECT_NE(whole, other);
}

} // namespace
