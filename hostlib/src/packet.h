// SPDX-License-Identifier: BSD-2-Clause
// Encoding and decoding of the two aggregation headers (proto.h, switchml.h)
// and of their big-endian int32 payload. Wire-neutral on the outside: the
// engine fills a StepHeader and gets a ResultView back.
#pragma once

#include <incxdp/reduce_op.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>

namespace incxdp::detail {

/// The fields of one data packet the engine chooses; the codec maps them to
/// the native header or to SwitchML (which has no round/chunk: they go into
/// the echoed tsi, see switchml_tag()).
struct StepHeader {
    uint32_t job = 0;
    uint32_t round = 0;
    uint32_t chunk = 0; ///< step number within the round
    uint16_t rank = 0;
    uint16_t nworkers = 0;
    uint16_t slot = 0;
    uint8_t set = 0;
    uint16_t nelems = 0; ///< int32 elements in the payload
    int8_t exp = 0;
    ReduceOp op = ReduceOp::Sum;
    DType dtype = DType::Int32;
};

/// A result as decoded. For SwitchML, round and chunk hold the tag's bits
/// (round & 0xff, chunk & 0xffffff) and `tagged` is true.
struct ResultView {
    uint32_t job = 0;
    uint32_t round = 0;
    uint32_t chunk = 0;
    uint16_t slot = 0;
    uint8_t set = 0;
    uint16_t nelems = 0;
    int8_t exp = 0;
    bool tagged = false;
    std::span<const std::byte> payload; ///< nelems big-endian int32
};

inline constexpr size_t kNativeHdrLen = 32;
inline constexpr size_t kSwitchmlHdrLen = 10;

size_t header_len(Wire w);

/// tsi of a SwitchML packet: round's low 8 bits over the step's low 24 bits.
/// One step per slot is in flight, so the low bits suffice to tell the
/// in-flight step from late results of earlier steps and earlier calls.
uint32_t switchml_tag(uint32_t round, uint32_t chunk);

/// SwitchML size code for 32 << code elements, or -1 if n is not 32/64/128/256.
int switchml_size_code(uint32_t nelems);

/// Write the data header for `h` at the start of `out` (header_len(w) bytes).
/// SwitchML: job_number = job & 0xff, tsi = switchml_tag(), size from nelems.
void encode_data(Wire w, const StepHeader &h, std::span<std::byte> out);

/// Same, for a switch: the result header (msg type RESULT). Used by tests.
void encode_result(Wire w, const StepHeader &h, std::span<std::byte> out);

/// Decode a RESULT datagram; nullopt if it is not one (bad magic, version,
/// type or size, or shorter than its header says).
std::optional<ResultView> decode_result(Wire w, std::span<const std::byte> pkt);

/// Decode a DATA datagram into a StepHeader (for reference switches and
/// tests); for SwitchML chunk/round are the tag's bits. nullopt if invalid.
std::optional<StepHeader> decode_data(Wire w, std::span<const std::byte> pkt);

inline void store_be32(std::byte *p, int32_t v) {
    uint32_t u = __builtin_bswap32(uint32_t(v)); // one bswap + store, not four byte stores
    std::memcpy(p, &u, 4);
}

inline int32_t load_be32(const std::byte *p) {
    uint32_t u;
    std::memcpy(&u, p, 4);
    return int32_t(__builtin_bswap32(u));
}

/// dst[0..4n) = n big-endian int32 of src; 16 bytes at a time (SSE2) where
/// available: packing and unpacking payloads is a visible share of a run's
/// CPU (docs/PERF.md).
void store_be32_n(std::byte *dst, const int32_t *src, size_t n);
/// dst[0..n) = the n big-endian int32 at src.
void load_be32_n(int32_t *dst, const std::byte *src, size_t n);

} // namespace incxdp::detail
