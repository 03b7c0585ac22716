// SPDX-License-Identifier: BSD-2-Clause
#include "packet.h"

#include <incxdp/proto.h>
#include <incxdp/switchml.h>

#include <arpa/inet.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <cstring>
#include <stdexcept>
#include <string>

namespace incxdp::detail {
namespace {

static_assert(sizeof(incxdp_hdr) == INCXDP_HDR_LEN && INCXDP_HDR_LEN == kNativeHdrLen);
static_assert(sizeof(switchml_hdr) == SWITCHML_HDR_LEN && SWITCHML_HDR_LEN == kSwitchmlHdrLen);

uint8_t wire_op(ReduceOp op) {
    switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: // a sum on the wire; the host divides
        return INCXDP_OP_SUM;
    case ReduceOp::Max:
        return INCXDP_OP_MAX;
    case ReduceOp::Min:
        return INCXDP_OP_MIN;
    }
    return INCXDP_OP_SUM;
}

std::optional<ReduceOp> op_from_wire(uint8_t v) {
    switch (v) {
    case INCXDP_OP_SUM:
        return ReduceOp::Sum;
    case INCXDP_OP_MAX:
        return ReduceOp::Max;
    case INCXDP_OP_MIN:
        return ReduceOp::Min;
    }
    return std::nullopt;
}

uint16_t slot_field(uint16_t slot, uint8_t set) {
    return htons(uint16_t((slot & INCXDP_SLOT_INDEX_MASK) | (set ? INCXDP_SLOT_SET_BIT : 0)));
}

void encode_native(uint8_t type, const StepHeader &h, std::span<std::byte> out) {
    if (out.size() < kNativeHdrLen)
        throw std::length_error("encode incxdp_hdr: buffer shorter than 32 bytes");
    incxdp_hdr w{};
    w.magic = INCXDP_MAGIC;
    w.ver_type = uint8_t(INCXDP_VERSION << 4 | type);
    w.op = wire_op(h.op);
    w.dtype = h.dtype == DType::Float32 ? INCXDP_DTYPE_FLOAT32 : INCXDP_DTYPE_INT32;
    w.job = htonl(h.job);
    w.round = htonl(h.round);
    w.chunk = htonl(h.chunk);
    w.rank = htons(h.rank);
    w.nworkers = htons(h.nworkers);
    w.slot = slot_field(h.slot, h.set);
    w.nelems = htons(h.nelems);
    w.exp = h.exp;
    std::memcpy(out.data(), &w, sizeof(w));
}

void encode_switchml(uint8_t type, const StepHeader &h, std::span<std::byte> out) {
    if (out.size() < kSwitchmlHdrLen)
        throw std::length_error("encode switchml_hdr: buffer shorter than 10 bytes");
    int code = switchml_size_code(h.nelems);
    if (code < 0)
        throw std::invalid_argument("encode switchml_hdr: " + std::to_string(h.nelems) +
                                    " elements is not 32, 64, 128 or 256");
    switchml_hdr w{};
    w.type_size = uint8_t(type << 4 | code);
    w.job_number = uint8_t(h.job);
    w.tsi = switchml_tag(h.round, h.chunk); // host byte order, like the reference client
    w.pool_index = slot_field(h.slot, h.set);
    w.e0 = h.exp;
    w.e1 = 0; // unused by incxdp hosts; the switch keeps its max anyway
    std::memcpy(out.data(), &w, sizeof(w));
}

// Common decode of both headers into a StepHeader plus message type.
std::optional<StepHeader> decode_any(Wire w, std::span<const std::byte> pkt, uint8_t &type) {
    StepHeader h;
    if (w == Wire::Native) {
        if (pkt.size() < kNativeHdrLen)
            return std::nullopt;
        incxdp_hdr n;
        std::memcpy(&n, pkt.data(), sizeof(n));
        if (n.magic != INCXDP_MAGIC || incxdp_hdr_version(&n) != INCXDP_VERSION)
            return std::nullopt;
        auto op = op_from_wire(n.op);
        if (!op || n.dtype >= INCXDP_DTYPE_COUNT)
            return std::nullopt;
        type = incxdp_hdr_type(&n);
        h.op = *op;
        h.dtype = n.dtype == INCXDP_DTYPE_FLOAT32 ? DType::Float32 : DType::Int32;
        h.job = ntohl(n.job);
        h.round = ntohl(n.round);
        h.chunk = ntohl(n.chunk);
        h.rank = ntohs(n.rank);
        h.nworkers = ntohs(n.nworkers);
        uint16_t slot = ntohs(n.slot);
        h.slot = slot & INCXDP_SLOT_INDEX_MASK;
        h.set = (slot & INCXDP_SLOT_SET_BIT) ? 1 : 0;
        h.nelems = ntohs(n.nelems);
        h.exp = n.exp;
        if (pkt.size() < kNativeHdrLen + size_t(h.nelems) * 4)
            return std::nullopt;
        return h;
    }
    if (pkt.size() < kSwitchmlHdrLen)
        return std::nullopt;
    switchml_hdr s;
    std::memcpy(&s, pkt.data(), sizeof(s));
    type = switchml_msg_type(&s);
    h.job = s.job_number;
    h.round = s.tsi >> 24;
    h.chunk = s.tsi & 0xffffff;
    uint16_t pool = ntohs(s.pool_index);
    h.slot = pool & SWITCHML_POOL_INDEX_MASK;
    h.set = (pool & SWITCHML_POOL_SET_BIT) ? 1 : 0;
    h.nelems = uint16_t(SWITCHML_ELEMS(switchml_size(&s)));
    h.exp = s.e0;
    if (pkt.size() < kSwitchmlHdrLen + size_t(h.nelems) * 4)
        return std::nullopt;
    return h;
}

} // namespace

size_t header_len(Wire w) {
    return w == Wire::Native ? kNativeHdrLen : kSwitchmlHdrLen;
}

uint32_t switchml_tag(uint32_t round, uint32_t chunk) {
    return (round & 0xff) << 24 | (chunk & 0xffffff);
}

int switchml_size_code(uint32_t nelems) {
    for (int code = 0; code <= SWITCHML_SIZE_MAX; ++code)
        if (SWITCHML_ELEMS(code) == nelems)
            return code;
    return -1;
}

void encode_data(Wire w, const StepHeader &h, std::span<std::byte> out) {
    if (w == Wire::Native)
        encode_native(INCXDP_MSG_DATA, h, out);
    else
        encode_switchml(SWITCHML_MSG_UPDATE, h, out);
}

void encode_result(Wire w, const StepHeader &h, std::span<std::byte> out) {
    if (w == Wire::Native)
        encode_native(INCXDP_MSG_RESULT, h, out);
    else
        encode_switchml(SWITCHML_MSG_RESULT, h, out);
}

std::optional<ResultView> decode_result(Wire w, std::span<const std::byte> pkt) {
    uint8_t type = 0;
    auto h = decode_any(w, pkt, type);
    if (!h || type != (w == Wire::Native ? INCXDP_MSG_RESULT : SWITCHML_MSG_RESULT))
        return std::nullopt;
    ResultView r;
    r.job = h->job;
    r.round = h->round;
    r.chunk = h->chunk;
    r.slot = h->slot;
    r.set = h->set;
    r.nelems = h->nelems;
    r.exp = h->exp;
    r.tagged = w == Wire::SwitchML;
    r.payload = pkt.subspan(header_len(w), size_t(h->nelems) * 4);
    return r;
}

std::optional<StepHeader> decode_data(Wire w, std::span<const std::byte> pkt) {
    uint8_t type = 0;
    auto h = decode_any(w, pkt, type);
    if (!h || type != (w == Wire::Native ? INCXDP_MSG_DATA : SWITCHML_MSG_UPDATE))
        return std::nullopt;
    return h;
}

#ifdef __SSE2__
namespace {
// Byte swap of four 32-bit lanes with SSE2 only (pshufb is SSSE3, not in
// the x86-64 baseline): swap the bytes of each 16-bit word, then the words.
inline __m128i bswap32x4(__m128i x) {
    x = _mm_or_si128(_mm_slli_epi16(x, 8), _mm_srli_epi16(x, 8));
    x = _mm_shufflelo_epi16(x, 0xB1);
    return _mm_shufflehi_epi16(x, 0xB1);
}
} // namespace
#endif

void store_be32_n(std::byte *dst, const int32_t *src, size_t n) {
    size_t i = 0;
#ifdef __SSE2__
    for (; i + 4 <= n; i += 4)
        _mm_storeu_si128(reinterpret_cast<__m128i *>(dst + 4 * i),
                         bswap32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + i))));
#endif
    for (; i < n; ++i)
        store_be32(dst + 4 * i, src[i]);
}

void load_be32_n(int32_t *dst, const std::byte *src, size_t n) {
    size_t i = 0;
#ifdef __SSE2__
    for (; i + 4 <= n; i += 4)
        _mm_storeu_si128(
            reinterpret_cast<__m128i *>(dst + i),
            bswap32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(src + 4 * i))));
#endif
    for (; i < n; ++i)
        dst[i] = load_be32(src + 4 * i);
}

} // namespace incxdp::detail
