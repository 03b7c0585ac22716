// SPDX-License-Identifier: BSD-2-Clause
#include "cm_payload.h"

#include <algorithm>
#include <cstring>

namespace incxdp::cm {

namespace {

uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ULL;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

uint64_t key_seed(uint32_t host, const Semantics &key) {
    return splitmix((uint64_t(host) << 32) ^ splitmix(key.fid) ^
                    splitmix(uint64_t(key.rid) << 20 ^ key.cid));
}

int32_t value_at(uint64_t seed, uint64_t i) {
    return static_cast<int32_t>(splitmix(seed + i) % 2001) - 1000;
}

} // namespace

void pattern_bytes(uint32_t flow_id, uint64_t offset, uint8_t *out, size_t len) {
    const uint64_t seed = splitmix(flow_id);
    size_t done = 0;
    while (done < len) {
        const uint64_t o = offset + done;
        const uint64_t w = splitmix(seed ^ (o / 8));
        for (uint64_t b = o % 8; b < 8 && done < len; ++b)
            out[done++] = static_cast<uint8_t>(w >> (8 * b));
    }
}

int32_t inc_value(uint32_t host, const Semantics &key, uint64_t i) {
    return value_at(key_seed(host, key), i);
}

void inc_bytes(uint32_t host, const Semantics &key, uint64_t size, uint64_t offset, uint8_t *out,
               size_t len) {
    const uint64_t seed = key_seed(host, key), elems = size / 4;
    size_t done = 0;
    while (done < len) {
        const uint64_t o = offset + done, i = o / 4;
        const uint32_t v = i < elems ? static_cast<uint32_t>(value_at(seed, i)) : 0;
        for (uint64_t b = o % 4; b < 4 && done < len; ++b)
            out[done++] = static_cast<uint8_t>(v >> (8 * b));
    }
}

Aggregate::Aggregate(uint32_t own_host, const Semantics &key, uint64_t size)
    : op_(key.op), key_(key), size_(size), acc_(size / 4) {
    for (uint64_t i = 0; i < acc_.size(); ++i)
        acc_[i] = inc_value(own_host, key, i);
}

void Aggregate::add(uint64_t i, int32_t v) {
    if (i >= acc_.size())
        return;
    switch (op_) {
    case AggOp::Sum:
    case AggOp::Avg:
        acc_[i] += v;
        break;
    case AggOp::Max:
        acc_[i] = std::max<int64_t>(acc_[i], v);
        break;
    case AggOp::Min:
        acc_[i] = std::min<int64_t>(acc_[i], v);
        break;
    }
}

void Aggregate::add_host(uint32_t host) {
    for (uint64_t i = 0; i < acc_.size(); ++i)
        add(i, inc_value(host, key_, i));
    contribution_done();
}

std::string Aggregate::bytes() const {
    std::string out(size_, '\0');
    for (uint64_t i = 0; i < acc_.size(); ++i) {
        const int64_t v = op_ == AggOp::Avg ? acc_[i] / contributions_ : acc_[i];
        const uint32_t u = static_cast<uint32_t>(static_cast<int32_t>(v));
        for (int b = 0; b < 4; ++b)
            out[4 * i + b] = static_cast<char>(u >> (8 * b));
    }
    return out;
}

} // namespace incxdp::cm
