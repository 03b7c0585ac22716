// SPDX-License-Identifier: BSD-2-Clause
// Header codecs against bytes written by hand from the wire tables
// (bpf/include/incxdp/proto.h, docs/PROTOCOLS.md §1-§2).
#include "packet.h"

#include <gtest/gtest.h>

#include <vector>

using namespace incxdp;
using namespace incxdp::detail;

namespace {

std::vector<std::byte> bytes(std::initializer_list<int> v) {
    std::vector<std::byte> out;
    for (int b : v)
        out.push_back(std::byte(b));
    return out;
}

StepHeader native_sample() {
    StepHeader h;
    h.job = 0x01020304;
    h.round = 0x0A0B0C0D;
    h.chunk = 0x11223344;
    h.rank = 3;
    h.nworkers = 4;
    h.slot = 5;
    h.set = 1;
    h.nelems = 16;
    h.exp = -3;
    h.op = ReduceOp::Max;
    h.dtype = DType::Float32;
    return h;
}

// magic, ver|type, op, dtype | job | round | chunk | rank, nworkers |
// slot|set, nelems | exp, flags, reserved | tsi
const std::vector<std::byte> kNativeData = bytes({
    0x1C, 0x10, 0x01, 0x01, 0x01, 0x02, 0x03, 0x04, 0x0A, 0x0B, 0x0C, 0x0D, 0x11, 0x22, 0x33, 0x44,
    0x00, 0x03, 0x00, 0x04, 0x80, 0x05, 0x00, 0x10, 0xFD, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
});

StepHeader switchml_sample() {
    StepHeader h;
    h.job = 0x107;        // job_number keeps the low byte
    h.round = 0x1234;     // tag: round & 0xff ...
    h.chunk = 0xABCDEF12; // ... over chunk & 0xffffff
    h.slot = 0x123;
    h.set = 1;
    h.nelems = 256; // size code 3
    h.exp = 5;
    return h;
}

// type:4|unused:1|size:3, job_number, tsi (host order = little-endian here),
// pool_index (big-endian, bit 15 = set), e0, e1
const std::vector<std::byte> kSwitchmlUpdate =
    bytes({0x03, 0x07, 0x12, 0xEF, 0xCD, 0x34, 0x81, 0x23, 0x05, 0x00});

} // namespace

TEST(Packet, NativeDataHeaderBytes) {
    std::vector<std::byte> out(32, std::byte(0xAA));
    encode_data(Wire::Native, native_sample(), out);
    EXPECT_EQ(out, kNativeData);
}

TEST(Packet, NativeResultHeaderBytes) {
    std::vector<std::byte> out(32);
    encode_result(Wire::Native, native_sample(), out);
    auto want = kNativeData;
    want[1] = std::byte(0x11); // version 1, type RESULT
    EXPECT_EQ(out, want);
}

TEST(Packet, NativeOpsAndDtypes) {
    std::vector<std::byte> out(32);
    StepHeader h = native_sample();
    h.op = ReduceOp::Sum;
    h.dtype = DType::Int32;
    h.set = 0;
    encode_data(Wire::Native, h, out);
    EXPECT_EQ(out[2], std::byte(0x00));
    EXPECT_EQ(out[3], std::byte(0x00));
    EXPECT_EQ(out[20], std::byte(0x00));
    EXPECT_EQ(out[21], std::byte(0x05));
    h.op = ReduceOp::Min;
    encode_data(Wire::Native, h, out);
    EXPECT_EQ(out[2], std::byte(0x02));
}

TEST(Packet, NativeResultDecode) {
    auto pkt = kNativeData;
    pkt[1] = std::byte(0x11);
    for (int b : {0x00, 0x00, 0x00, 0x07, 0xFF, 0xFF, 0xFF, 0xFE}) // 7, -2 ...
        pkt.push_back(std::byte(b));
    pkt.resize(32 + 16 * 4);
    auto r = decode_result(Wire::Native, pkt);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->job, 0x01020304u);
    EXPECT_EQ(r->round, 0x0A0B0C0Du);
    EXPECT_EQ(r->chunk, 0x11223344u);
    EXPECT_EQ(r->slot, 5);
    EXPECT_EQ(r->set, 1);
    EXPECT_EQ(r->nelems, 16);
    EXPECT_EQ(r->exp, -3);
    EXPECT_FALSE(r->tagged);
    ASSERT_EQ(r->payload.size(), 64u);
    EXPECT_EQ(load_be32(r->payload.data()), 7);
    EXPECT_EQ(load_be32(r->payload.data() + 4), -2);
}

TEST(Packet, NativeDecodeRejects) {
    auto pkt = kNativeData;
    pkt[1] = std::byte(0x11);
    pkt.resize(32 + 64);
    EXPECT_TRUE(decode_result(Wire::Native, pkt));
    EXPECT_FALSE(decode_result(Wire::Native, std::span(pkt).first(31)));      // short header
    EXPECT_FALSE(decode_result(Wire::Native, std::span(pkt).first(32 + 60))); // short payload
    auto bad = pkt;
    bad[0] = std::byte(0x1D); // magic
    EXPECT_FALSE(decode_result(Wire::Native, bad));
    bad = pkt;
    bad[1] = std::byte(0x21); // version 2
    EXPECT_FALSE(decode_result(Wire::Native, bad));
    bad = pkt;
    bad[1] = std::byte(0x10); // DATA is not a result
    EXPECT_FALSE(decode_result(Wire::Native, bad));
    EXPECT_TRUE(decode_data(Wire::Native, bad));
    bad = pkt;
    bad[2] = std::byte(0x03); // op out of range
    EXPECT_FALSE(decode_result(Wire::Native, bad));
}

TEST(Packet, NativeRoundTrip) {
    std::vector<std::byte> out(32 + 16 * 4);
    StepHeader h = native_sample();
    encode_data(Wire::Native, h, out);
    auto d = decode_data(Wire::Native, out);
    ASSERT_TRUE(d);
    EXPECT_EQ(d->job, h.job);
    EXPECT_EQ(d->round, h.round);
    EXPECT_EQ(d->chunk, h.chunk);
    EXPECT_EQ(d->rank, h.rank);
    EXPECT_EQ(d->nworkers, h.nworkers);
    EXPECT_EQ(d->slot, h.slot);
    EXPECT_EQ(d->set, h.set);
    EXPECT_EQ(d->nelems, h.nelems);
    EXPECT_EQ(d->exp, h.exp);
    EXPECT_EQ(d->op, h.op);
    EXPECT_EQ(d->dtype, h.dtype);
}

TEST(Packet, SwitchmlUpdateHeaderBytes) {
    std::vector<std::byte> out(10, std::byte(0xAA));
    encode_data(Wire::SwitchML, switchml_sample(), out);
    EXPECT_EQ(out, kSwitchmlUpdate);
}

TEST(Packet, SwitchmlResultHeaderBytes) {
    std::vector<std::byte> out(10);
    encode_result(Wire::SwitchML, switchml_sample(), out);
    auto want = kSwitchmlUpdate;
    want[0] = std::byte(0x13); // RESULT, size 3
    EXPECT_EQ(out, want);
}

TEST(Packet, SwitchmlSizes) {
    EXPECT_EQ(switchml_size_code(32), 0);
    EXPECT_EQ(switchml_size_code(64), 1);
    EXPECT_EQ(switchml_size_code(128), 2);
    EXPECT_EQ(switchml_size_code(256), 3);
    EXPECT_EQ(switchml_size_code(100), -1);
    std::vector<std::byte> out(10);
    StepHeader h = switchml_sample();
    h.nelems = 64;
    h.set = 0;
    encode_data(Wire::SwitchML, h, out);
    EXPECT_EQ(out[0], std::byte(0x01));
    EXPECT_EQ(out[6], std::byte(0x01));
    EXPECT_EQ(out[7], std::byte(0x23));
    h.nelems = 100;
    EXPECT_THROW(encode_data(Wire::SwitchML, h, out), std::invalid_argument);
}

TEST(Packet, SwitchmlResultDecode) {
    auto pkt = kSwitchmlUpdate;
    pkt[0] = std::byte(0x11); // RESULT, size 1 = 64 elements
    pkt.resize(10 + 64 * 4);
    pkt[10 + 3] = std::byte(0x2A);
    auto r = decode_result(Wire::SwitchML, pkt);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->job, 0x07u);
    EXPECT_EQ(r->round, 0x34u);
    EXPECT_EQ(r->chunk, 0xCDEF12u);
    EXPECT_EQ(r->slot, 0x123);
    EXPECT_EQ(r->set, 1);
    EXPECT_EQ(r->nelems, 64);
    EXPECT_EQ(r->exp, 5);
    EXPECT_TRUE(r->tagged);
    EXPECT_EQ(load_be32(r->payload.data()), 42);
    EXPECT_FALSE(decode_result(Wire::SwitchML, std::span(pkt).first(10 + 63 * 4)));
    pkt[0] = std::byte(0x01); // UPDATE
    EXPECT_FALSE(decode_result(Wire::SwitchML, pkt));
}

TEST(Packet, SwitchmlTag) {
    EXPECT_EQ(switchml_tag(0x1234, 0xABCDEF12), 0x34CDEF12u);
    EXPECT_EQ(switchml_tag(1, 0), 0x01000000u);
}

TEST(Packet, BigEndianPayload) {
    std::byte b[4];
    store_be32(b, int32_t(0x80000001));
    EXPECT_EQ(b[0], std::byte(0x80));
    EXPECT_EQ(b[3], std::byte(0x01));
    EXPECT_EQ(load_be32(b), int32_t(0x80000001));
    store_be32(b, -1);
    EXPECT_EQ(load_be32(b), -1);
}
