// SPDX-License-Identifier: BSD-2-Clause
#include "cm_parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace incxdp::cm {

CmError::CmError(int l, std::string tok, const std::string &what)
    : std::runtime_error(what), line(l), token(std::move(tok)) {}

const char *agg_op_name(AggOp op) {
    switch (op) {
    case AggOp::Sum:
        return "SUM";
    case AggOp::Max:
        return "MAX";
    case AggOp::Min:
        return "MIN";
    case AggOp::Avg:
        return "AVG";
    }
    return "?";
}

const char *agg_dir_name(AggDir dir) {
    return dir == AggDir::Up ? "UP" : "DOWN";
}

const char *trigger_kind_name(TriggerKind k) {
    switch (k) {
    case TriggerKind::Oneshot:
        return "oneshot";
    case TriggerKind::Multishot:
        return "multishot";
    case TriggerKind::Barrier:
        return "barrier";
    }
    return "?";
}

const char *switch_type_name(SwitchType t) {
    switch (t) {
    case SwitchType::Tor:
        return "TOR";
    case SwitchType::Agg:
        return "AGG";
    case SwitchType::Core:
        return "CORE";
    }
    return "?";
}

bool Flow::operator==(const Flow &o) const {
    return src == o.src && dst == o.dst && id == o.id && start_ps == o.start_ps &&
           trigger == o.trigger && size == o.size && send_done == o.send_done &&
           recv_done == o.recv_done && prio == o.prio && semantics == o.semantics;
}

uint32_t Matrix::node_count() const {
    if (nodes)
        return *nodes;
    uint32_t n = 0;
    for (const Flow &f : flows)
        n = std::max({n, f.src + 1, f.dst + 1});
    return n;
}

const Trigger *Matrix::trigger(uint32_t id) const {
    for (const Trigger &t : triggers)
        if (t.id == id)
            return &t;
    return nullptr;
}

const Flow *Matrix::flow(uint32_t id) const {
    for (const Flow &f : flows)
        if (f.id == id)
            return &f;
    return nullptr;
}

namespace {

// One line being parsed: its tokens, and errors that quote it.
struct Line {
    int no = 0;
    std::string text;
    std::vector<std::string> tok;
    size_t pos = 0; // next token

    [[noreturn]] void fail(const std::string &token, const std::string &problem) const {
        throw CmError(no, token,
                      fmt::format("line {}: {} (token '{}'): {}", no, problem, token, text));
    }
    bool more() const { return pos < tok.size(); }
    const std::string &next(const std::string &after) {
        if (!more())
            fail(after, fmt::format("'{}' needs a value", after));
        return tok[pos++];
    }
};

template <typename T> T parse_uint(Line &l, const std::string &key) {
    const std::string &s = l.next(key);
    T v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size())
        l.fail(s, fmt::format("malformed number for '{}'", key));
    return v;
}

int64_t parse_int(Line &l, const std::string &key) {
    const std::string &s = l.next(key);
    int64_t v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size())
        l.fail(s, fmt::format("malformed number for '{}'", key));
    return v;
}

double parse_time(Line &l) {
    const std::string &s = l.next("start");
    double v{};
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size() || !std::isfinite(v) || v < 0)
        l.fail(s, "malformed start time (picoseconds, a non-negative number)");
    return v;
}

void parse_semantics(Line &l, Semantics &sem) {
    static const char *const kKeys[] = {"agg_op", "agg_dir", "fid", "rid", "cid"};
    std::set<std::string> seen;
    while (l.more() && seen.size() < 5) {
        const std::string &key = l.tok[l.pos];
        if (std::find(std::begin(kKeys), std::end(kKeys), key) == std::end(kKeys))
            break;
        if (!seen.insert(key).second)
            l.fail(key, "duplicate semantics key");
        ++l.pos;
        if (key == "agg_op") {
            const std::string &v = l.next(key);
            if (v == "SUM")
                sem.op = AggOp::Sum;
            else if (v == "MAX")
                sem.op = AggOp::Max;
            else if (v == "MIN")
                sem.op = AggOp::Min;
            else if (v == "AVG")
                sem.op = AggOp::Avg;
            else
                l.fail(v, "agg_op must be SUM, MAX, MIN or AVG");
        } else if (key == "agg_dir") {
            const std::string &v = l.next(key);
            if (v == "UP")
                sem.dir = AggDir::Up;
            else if (v == "DOWN")
                sem.dir = AggDir::Down;
            else
                l.fail(v, "agg_dir must be UP or DOWN");
        } else if (key == "fid") {
            sem.fid = parse_uint<uint32_t>(l, key);
        } else if (key == "rid") {
            sem.rid = parse_uint<uint32_t>(l, key);
        } else {
            sem.cid = parse_uint<uint32_t>(l, key);
        }
    }
    for (const char *k : kKeys)
        if (!seen.count(k))
            l.fail("semantics", fmt::format("semantics without '{}'", k));
}

Flow parse_flow(Line &l, std::optional<uint32_t> nodes) {
    Flow f;
    f.line = l.no;
    const std::string &ends = l.tok[l.pos++];
    size_t arrow = ends.find("->");
    auto num = [&](std::string_view s, uint32_t &out) {
        auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
        return ec == std::errc() && p == s.data() + s.size() && !s.empty();
    };
    if (arrow == std::string::npos || !num(std::string_view(ends).substr(0, arrow), f.src) ||
        !num(std::string_view(ends).substr(arrow + 2), f.dst))
        l.fail(ends, "a flow starts with SRC->DST (node indices)");
    if (nodes && (f.src >= *nodes || f.dst >= *nodes))
        l.fail(ends, fmt::format("node {} >= Nodes {}", std::max(f.src, f.dst), *nodes));
    std::set<std::string> seen;
    bool has_id = false;
    while (l.more()) {
        const std::string key = l.tok[l.pos++];
        if (!seen.insert(key).second)
            l.fail(key, "duplicate key");
        if (key == "id") {
            f.id = parse_uint<uint32_t>(l, key);
            has_id = true;
        } else if (key == "start") {
            if (f.trigger)
                l.fail(key, "a flow has either 'start' or 'trigger', not both");
            f.start_ps = parse_time(l);
        } else if (key == "size") {
            f.size = parse_uint<uint64_t>(l, key);
        } else if (key == "trigger") {
            if (!has_id)
                l.fail(key, "'trigger' before 'id' (htsim needs the flow id first)");
            if (f.start_ps)
                l.fail(key, "a flow has either 'start' or 'trigger', not both");
            f.trigger = parse_uint<uint32_t>(l, key);
        } else if (key == "send_done_trigger") {
            f.send_done = parse_uint<uint32_t>(l, key);
        } else if (key == "recv_done_trigger") {
            f.recv_done = parse_uint<uint32_t>(l, key);
        } else if (key == "prio") {
            f.prio = parse_int(l, key);
        } else if (key == "semantics") {
            parse_semantics(l, f.semantics.emplace());
        } else {
            l.fail(key, "unknown token");
        }
    }
    if (!has_id)
        l.fail(ends, "a flow needs 'id'");
    if (f.id == 0)
        l.fail("0", "flow id 0 (ids are non-zero)");
    if (!f.start_ps && !f.trigger)
        l.fail(ends, "a flow needs 'start' or 'trigger'");
    return f;
}

Trigger parse_trigger(Line &l) {
    Trigger t;
    t.line = l.no;
    ++l.pos; // "trigger"
    if (!l.more() || l.tok[l.pos] != "id")
        l.fail(l.more() ? l.tok[l.pos] : "trigger", "expected 'trigger id N KIND'");
    ++l.pos;
    t.id = parse_uint<uint32_t>(l, "id");
    if (t.id == 0)
        l.fail("0", "trigger id 0 (ids are non-zero)");
    const std::string &kind = l.next("trigger id");
    if (kind == "oneshot")
        t.kind = TriggerKind::Oneshot;
    else if (kind == "multishot")
        t.kind = TriggerKind::Multishot;
    else if (kind == "barrier")
        t.kind = TriggerKind::Barrier;
    else
        l.fail(kind, "trigger kind must be oneshot, multishot or barrier");
    if (l.more()) {
        const std::string &key = l.tok[l.pos++];
        if (key != "count")
            l.fail(key, "unknown token");
        if (t.kind != TriggerKind::Barrier)
            l.fail(key, "only a barrier takes 'count'");
        t.count = parse_uint<uint32_t>(l, key);
        if (t.count == 0)
            l.fail("0", "barrier count 0");
    }
    if (l.more())
        l.fail(l.tok[l.pos], "unknown token");
    if (t.kind == TriggerKind::Barrier && t.count == 0)
        l.fail(kind, "a barrier needs 'count K'");
    return t;
}

Failure parse_failure(Line &l) {
    Failure f;
    f.line = l.no;
    ++l.pos; // "failure"
    std::set<std::string> seen;
    while (l.more()) {
        const std::string key = l.tok[l.pos++];
        if (!seen.insert(key).second)
            l.fail(key, "duplicate key");
        if (key == "switch_type") {
            const std::string &v = l.next(key);
            if (v == "TOR")
                f.type = SwitchType::Tor;
            else if (v == "AGG")
                f.type = SwitchType::Agg;
            else if (v == "CORE")
                f.type = SwitchType::Core;
            else
                l.fail(v, "switch_type must be TOR, AGG or CORE");
        } else if (key == "switch_id") {
            f.switch_id = parse_uint<uint32_t>(l, key);
        } else if (key == "link_id") {
            f.link_id = parse_uint<uint32_t>(l, key);
        } else {
            l.fail(key, "unknown token");
        }
    }
    for (const char *k : {"switch_type", "switch_id", "link_id"})
        if (!seen.count(k))
            l.fail("failure", fmt::format("failure without '{}'", k));
    return f;
}

std::vector<std::string> split(const std::string &s) {
    std::vector<std::string> out;
    std::istringstream in(s);
    for (std::string t; in >> t;)
        out.push_back(t);
    return out;
}

struct HeaderValue {
    uint32_t value = 0;
    int line = 0;
    std::string text;
};

// Reports a trigger firing flaw: an error, or in lenient mode a warning.
struct FlawSink {
    bool lenient;
    std::vector<std::string> &warnings;
    void operator()(const Trigger &t, const std::string &token, const std::string &problem,
                    const std::string &text) const {
        std::string msg = fmt::format("line {}: {} (token '{}'): {}", t.line, problem, token, text);
        if (!lenient)
            throw CmError(t.line, token, msg);
        warnings.push_back(msg);
    }
};

// Who fires each trigger and who waits on it, checked against its kind.
void check_triggers(Matrix &m, const std::map<int, std::string> &texts, bool lenient) {
    std::map<uint32_t, std::vector<const Flow *>> firers, waiters;
    for (const Flow &f : m.flows) {
        for (auto [id, key] :
             {std::pair{f.trigger, "trigger"}, std::pair{f.send_done, "send_done_trigger"},
              std::pair{f.recv_done, "recv_done_trigger"}}) {
            if (!id)
                continue;
            if (!m.trigger(*id)) {
                Line l{f.line, texts.at(f.line), {}, 0};
                l.fail(std::to_string(*id),
                       fmt::format("'{} {}' names a trigger that is never declared", key, *id));
            }
        }
        if (f.trigger)
            waiters[*f.trigger].push_back(&f);
        if (f.send_done)
            firers[*f.send_done].push_back(&f);
        if (f.recv_done)
            firers[*f.recv_done].push_back(&f);
    }
    FlawSink flaw{lenient, m.warnings};
    for (const Trigger &t : m.triggers) {
        const std::string &text = texts.at(t.line);
        const size_t fired = firers[t.id].size(), waiting = waiters[t.id].size();
        std::string id = std::to_string(t.id);
        if (t.kind == TriggerKind::Oneshot && fired > 1)
            flaw(t, id,
                 fmt::format("oneshot trigger {} is fired by {} flows (ids {} and {}); htsim "
                             "aborts on its second firing",
                             t.id, fired, firers[t.id][0]->id, firers[t.id][1]->id),
                 text);
        if (t.kind == TriggerKind::Oneshot && waiting == 0)
            flaw(t, id,
                 fmt::format("oneshot trigger {} has no waiting flow; htsim aborts when it fires",
                             t.id),
                 text);
        if (t.kind == TriggerKind::Barrier && fired > t.count)
            flaw(t, id,
                 fmt::format("barrier {} is fired by {} flows but counts {}", t.id, fired, t.count),
                 text);
        const size_t needed = t.kind == TriggerKind::Barrier ? t.count : 1;
        if (waiting > 0 && fired < needed)
            m.warnings.push_back(fmt::format(
                "line {}: trigger {} needs {} firing(s) but only {} flow(s) fire it: its {} "
                "waiting flow(s) never start",
                t.line, t.id, needed, fired, waiting));
        if (t.kind == TriggerKind::Multishot && waiting < fired)
            m.warnings.push_back(
                fmt::format("line {}: multishot trigger {} fires {} times for {} waiting flow(s)",
                            t.line, t.id, fired, waiting));
    }
}

} // namespace

Matrix parse(std::string_view text, const ParseOptions &opts) {
    Matrix m;
    std::map<std::string, HeaderValue> header;
    std::map<int, std::string> texts;
    std::set<uint32_t> flow_ids;
    bool body = false;
    int no = 0;
    size_t at = 0;
    while (at <= text.size()) {
        size_t nl = text.find('\n', at);
        std::string raw(
            text.substr(at, nl == std::string_view::npos ? std::string_view::npos : nl - at));
        at = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
        ++no;
        if (!raw.empty() && raw.back() == '\r')
            raw.pop_back();
        Line l{no, raw, split(raw), 0};
        // htsim rejects `#` in the body; the INC generator writes them there.
        if (l.tok.empty() || l.tok[0][0] == '#')
            continue;
        texts[no] = raw;
        const std::string &first = l.tok[0];
        if (first == "Nodes" || first == "Connections" || first == "Triggers" ||
            first == "Failures") {
            if (body)
                l.fail(first, "header line after the first flow, trigger or failure");
            if (header.count(first))
                l.fail(first, "duplicate header line");
            l.pos = 1;
            HeaderValue &h = header[first];
            h.value = parse_uint<uint32_t>(l, first);
            h.line = no;
            h.text = raw;
            if (l.more())
                l.fail(l.tok[l.pos], "unknown token");
            if (first == "Nodes")
                m.nodes = h.value;
            continue;
        }
        body = true;
        if (first == "trigger") {
            Trigger t = parse_trigger(l);
            if (m.trigger(t.id))
                l.fail(std::to_string(t.id), "duplicate trigger id");
            m.triggers.push_back(t);
        } else if (first == "failure") {
            m.failures.push_back(parse_failure(l));
        } else if (first.find("->") != std::string::npos) {
            Flow f = parse_flow(l, m.nodes);
            if (!flow_ids.insert(f.id).second)
                l.fail(std::to_string(f.id), "duplicate flow id");
            m.flows.push_back(f);
        } else {
            l.fail(first, "unknown token");
        }
    }
    auto count_check = [&](const char *key, size_t actual, const char *what) {
        auto it = header.find(key);
        if (it == header.end() || it->second.value == actual)
            return;
        Line l{it->second.line, it->second.text, {}, 0};
        l.fail(key, fmt::format("header says {} {} but the file has {} {}", key, it->second.value,
                                actual, what));
    };
    count_check("Connections", m.flows.size(), "flows");
    count_check("Triggers", m.triggers.size(), "trigger lines");
    count_check("Failures", m.failures.size(), "failure lines");
    check_triggers(m, texts, opts.lenient);
    return m;
}

Matrix parse_file(const std::string &path, const ParseOptions &opts) {
    std::ifstream in(path, std::ios::binary);
    if (!in)
        throw CmError(0, path, fmt::format("cannot read connection matrix '{}'", path));
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse(ss.str(), opts);
}

namespace {

std::string fmt_time(double ps) {
    if (ps == std::floor(ps) && ps < 9007199254740992.0)
        return fmt::format("{:.0f}", ps);
    return fmt::format("{}", ps); // shortest text that reads back the same
}

} // namespace

std::string to_text(const Matrix &m) {
    std::string out = fmt::format("Nodes {}\nConnections {}\n", m.node_count(), m.flows.size());
    if (!m.triggers.empty())
        out += fmt::format("Triggers {}\n", m.triggers.size());
    if (!m.failures.empty())
        out += fmt::format("Failures {}\n", m.failures.size());
    for (const Flow &f : m.flows) {
        out += fmt::format("{}->{} id {}", f.src, f.dst, f.id);
        if (f.start_ps)
            out += " start " + fmt_time(*f.start_ps);
        if (f.trigger)
            out += fmt::format(" trigger {}", *f.trigger);
        out += fmt::format(" size {}", f.size);
        if (f.prio)
            out += fmt::format(" prio {}", *f.prio);
        if (f.semantics) {
            const Semantics &s = *f.semantics;
            out += fmt::format(" semantics agg_op {} agg_dir {} fid {} rid {} cid {}",
                               agg_op_name(s.op), agg_dir_name(s.dir), s.fid, s.rid, s.cid);
        }
        if (f.send_done)
            out += fmt::format(" send_done_trigger {}", *f.send_done);
        if (f.recv_done)
            out += fmt::format(" recv_done_trigger {}", *f.recv_done);
        out += '\n';
    }
    for (const Trigger &t : m.triggers) {
        out += fmt::format("trigger id {} {}", t.id, trigger_kind_name(t.kind));
        if (t.kind == TriggerKind::Barrier)
            out += fmt::format(" count {}", t.count);
        out += '\n';
    }
    for (const Failure &f : m.failures)
        out += fmt::format("failure switch_type {} switch_id {} link_id {}\n",
                           switch_type_name(f.type), f.switch_id, f.link_id);
    return out;
}

} // namespace incxdp::cm
