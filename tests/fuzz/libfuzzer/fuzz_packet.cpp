// SPDX-License-Identifier: BSD-2-Clause
// hostlib's packet decoders (hostlib/src/packet.h), both wires: what a
// worker does with every datagram its socket receives (decode_result) and
// what the reference switch does with contributions (decode_data).
//
// Input: one selector byte (bit 0: SwitchML, bit 1: RESULT), then the UDP
// payload. Properties: a decoded view lies inside the datagram and holds
// exactly nelems elements; decode(encode(decode(x))) == decode(x).
#include "check.h"
#include "packet.h"

#include <cstdint>
#include <cstring>
#include <span>
#include <stdexcept>
#include <vector>

using namespace incxdp;
using namespace incxdp::detail;

namespace {

bool same(const StepHeader &a, const StepHeader &b) {
    return a.job == b.job && a.round == b.round && a.chunk == b.chunk && a.rank == b.rank &&
           a.nworkers == b.nworkers && a.slot == b.slot && a.set == b.set && a.nelems == b.nelems &&
           a.exp == b.exp && a.op == b.op && a.dtype == b.dtype;
}

// Re-encodes a header with the codec and returns header + the original payload.
std::vector<std::byte> reencode(Wire w, bool result, const StepHeader &h,
                                std::span<const std::byte> payload) {
    std::vector<std::byte> buf(header_len(w) + payload.size());
    if (result)
        encode_result(w, h, buf);
    else
        encode_data(w, h, buf);
    if (!payload.empty())
        std::memcpy(buf.data() + header_len(w), payload.data(), payload.size());
    return buf;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const Wire w = (data[0] & 1) ? Wire::SwitchML : Wire::Native;
    const bool result = data[0] & 2;
    const std::span<const std::byte> pkt(reinterpret_cast<const std::byte *>(data + 1), size - 1);
    // SwitchML has four sizes; the encoder refuses others, so no round trip.
    auto encodable = [&](uint16_t n) { return w == Wire::Native || switchml_size_code(n) >= 0; };

    if (result) {
        auto r = decode_result(w, pkt);
        if (!r)
            return 0;
        FUZZ_CHECK(r->payload.size() == size_t(r->nelems) * 4);
        FUZZ_CHECK(r->payload.data() == pkt.data() + header_len(w));
        FUZZ_CHECK(header_len(w) + r->payload.size() <= pkt.size());
        FUZZ_CHECK(r->tagged == (w == Wire::SwitchML));
        if (w == Wire::SwitchML)
            FUZZ_CHECK(r->round <= 0xff && r->chunk <= 0xffffff && r->job <= 0xff);
        if (!encodable(r->nelems))
            return 0;
        StepHeader h;
        h.job = r->job;
        h.round = r->round;
        h.chunk = r->chunk;
        h.slot = r->slot;
        h.set = r->set;
        h.nelems = r->nelems;
        h.exp = r->exp;
        auto again = reencode(w, true, h, r->payload);
        auto r2 = decode_result(w, again);
        FUZZ_CHECK(r2.has_value());
        FUZZ_CHECK(r2->job == r->job && r2->round == r->round && r2->chunk == r->chunk &&
                   r2->slot == r->slot && r2->set == r->set && r2->nelems == r->nelems &&
                   r2->exp == r->exp);
        FUZZ_CHECK(!decode_data(w, again).has_value()); // a RESULT is never taken for DATA
        return 0;
    }
    auto h = decode_data(w, pkt);
    if (!h)
        return 0;
    FUZZ_CHECK(header_len(w) + size_t(h->nelems) * 4 <= pkt.size());
    FUZZ_CHECK(h->slot <= 0x3fff && h->set <= 1);
    if (!encodable(h->nelems))
        return 0;
    auto again = reencode(w, false, *h, pkt.subspan(header_len(w), size_t(h->nelems) * 4));
    auto h2 = decode_data(w, again);
    FUZZ_CHECK(h2.has_value());
    FUZZ_CHECK(same(*h, *h2));
    FUZZ_CHECK(!decode_result(w, again).has_value());
    return 0;
}
