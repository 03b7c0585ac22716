// SPDX-License-Identifier: BSD-2-Clause
#include "cm_inc_path.h"

#include <fmt/format.h>

#include <cstring>
#include <stdexcept>
#include <utility>

namespace incxdp::cm {

IncKey inc_key(const Flow &f) {
    const Semantics &s = *f.semantics;
    return {s.fid, s.rid, s.cid, s.dir == AggDir::Up ? f.dst : f.src};
}

void IncPath::payload(const Flow &f, uint64_t, uint8_t *, size_t) {
    throw std::logic_error(fmt::format("{} path: flow {} does not run over TCP", kind(), f.id));
}

void IncPath::expected(const Flow &f, uint64_t, uint8_t *, size_t) {
    throw std::logic_error(fmt::format("{} path: flow {} does not run over TCP", kind(), f.id));
}

void IncPath::fold(const Flow &, uint64_t, int32_t) {}

std::vector<size_t> IncPath::up_done(const Flow &) {
    return {};
}

HostIncPath::HostIncPath(const Matrix &m) : m_(m) {
    std::map<std::tuple<uint32_t, uint32_t, uint32_t>, const Flow *> first;
    for (const Flow &f : m.flows) {
        if (!f.semantics)
            continue;
        const Semantics &s = *f.semantics;
        auto [it, fresh] = first.try_emplace({s.fid, s.rid, s.cid}, &f);
        if (!fresh && (it->second->size != f.size || it->second->semantics->op != s.op))
            throw std::runtime_error(
                fmt::format("INC flows {} and {} of fid {} rid {} cid {} differ in size or "
                            "agg_op: host aggregation needs one vector per key",
                            it->second->id, f.id, s.fid, s.rid, s.cid));
        const IncKey k = inc_key(f);
        State &st = state_.try_emplace(k, k.agg, s, f.size).first->second;
        if (s.dir == AggDir::Up)
            st.up_expected++;
    }
}

HostIncPath::State &HostIncPath::state(const Flow &f) {
    State &st = state_.at(inc_key(f));
    if (st.up_expected == 0 && st.result.empty())
        st.result = st.acc.bytes(); // nothing to wait for: the host's own vector
    return st;
}

IncStart HostIncPath::release(const Flow &f, size_t idx) {
    if (f.semantics->dir == AggDir::Up)
        return IncStart::Open;
    State &st = state(f);
    if (st.up_received == st.up_expected)
        return IncStart::Open;
    st.held.push_back(idx);
    return IncStart::Held;
}

void HostIncPath::payload(const Flow &f, uint64_t off, uint8_t *out, size_t len) {
    if (f.semantics->dir == AggDir::Up)
        return inc_bytes(f.src, *f.semantics, f.size, off, out, len);
    std::memcpy(out, state(f).result.data() + off, len);
}

void HostIncPath::expected(const Flow &f, uint64_t off, uint8_t *out, size_t len) {
    if (f.semantics->dir == AggDir::Up)
        return inc_bytes(f.src, *f.semantics, f.size, off, out, len);
    State &st = state(f);
    if (st.expected.empty()) {
        Aggregate e(st.agg_host, *f.semantics, f.size);
        const IncKey k = inc_key(f);
        for (const Flow &u : m_.flows)
            if (u.semantics && u.semantics->dir == AggDir::Up && !(inc_key(u) < k) &&
                !(k < inc_key(u)))
                e.add_host(u.src);
        st.expected = e.bytes();
    }
    std::memcpy(out, st.expected.data() + off, len);
}

void HostIncPath::fold(const Flow &up, uint64_t i, int32_t v) {
    state(up).acc.add(i, v);
}

std::vector<size_t> HostIncPath::up_done(const Flow &up) {
    State &st = state(up);
    st.acc.contribution_done();
    if (++st.up_received < st.up_expected)
        return {};
    st.result = st.acc.bytes();
    return std::exchange(st.held, {});
}

} // namespace incxdp::cm
