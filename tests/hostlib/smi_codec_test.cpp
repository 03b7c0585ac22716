// SPDX-License-Identifier: BSD-2-Clause
// SMI's network message (bpf/include/incxdp/smi_wire.h): layout, the
// elems_and_op byte, elements per message per type; the C API's enums.
#include "smi_runtime.h"

#include <incxdp/smi.hpp>

#include <gtest/gtest.h>

#include <cstddef>

TEST(SmiWire, MessageIsSmisLayout) {
    EXPECT_EQ(sizeof(incxdp_smi_msg), 32u);
    EXPECT_EQ(offsetof(incxdp_smi_msg, src), 28u);
    EXPECT_EQ(offsetof(incxdp_smi_msg, dst), 29u);
    EXPECT_EQ(offsetof(incxdp_smi_msg, port), 30u);
    EXPECT_EQ(offsetof(incxdp_smi_msg, elems_and_op), 31u);
}

TEST(SmiWire, ElemsInTheUpperFiveBitsOpInTheLowerThree) {
    EXPECT_EQ(incxdp_smi_pack(7, INCXDP_SMI_OP_SEND), 7 << 3);
    EXPECT_EQ(incxdp_smi_pack(28, INCXDP_SMI_OP_GATHER), 28 << 3 | 6);
    for (unsigned e = 0; e < 32; e++)
        for (unsigned op = 0; op < 8; op++) {
            uint8_t b = incxdp_smi_pack(e, op);
            EXPECT_EQ(incxdp_smi_elems(b), e);
            EXPECT_EQ(incxdp_smi_op(b), op);
        }
    EXPECT_EQ(INCXDP_SMI_OP_RECEIVE, 1);
    EXPECT_EQ(INCXDP_SMI_OP_BROADCAST, 2);
    EXPECT_EQ(INCXDP_SMI_OP_SYNCH, 3);
    EXPECT_EQ(INCXDP_SMI_OP_SCATTER, 4);
    EXPECT_EQ(INCXDP_SMI_OP_REDUCE, 5);
}

TEST(SmiWire, ElementsPerMessageFillTheData) {
    using incxdp::smi::elem_size;
    using incxdp::smi::elems_per_msg;
    EXPECT_EQ(elems_per_msg(SMI_CHAR), 28);
    EXPECT_EQ(elems_per_msg(SMI_SHORT), 14);
    EXPECT_EQ(elems_per_msg(SMI_INT), 7);
    EXPECT_EQ(elems_per_msg(SMI_FLOAT), 7);
    EXPECT_EQ(elems_per_msg(SMI_DOUBLE), 3);
    for (SMI_Datatype t : {SMI_CHAR, SMI_SHORT, SMI_INT, SMI_FLOAT, SMI_DOUBLE})
        EXPECT_LE(elem_size(t) * elems_per_msg(t), INCXDP_SMI_DATA_LEN);
}

TEST(SmiApi, EnumValuesAreSmis) {
    EXPECT_EQ(SMI_INT, 1);
    EXPECT_EQ(SMI_FLOAT, 2);
    EXPECT_EQ(SMI_DOUBLE, 3);
    EXPECT_EQ(SMI_CHAR, 4);
    EXPECT_EQ(SMI_SHORT, 5);
    EXPECT_EQ(SMI_ADD, 0);
    EXPECT_EQ(SMI_MAX, 1);
    EXPECT_EQ(SMI_MIN, 2);
}

TEST(SmiWire, StreamKeysDoNotCollide) {
    EXPECT_NE(incxdp::smi::stream_key(1, 2, 0), incxdp::smi::stream_key(2, 1, 0));
    EXPECT_NE(incxdp::smi::stream_key(255, 255, 6), incxdp::smi::stream_key(255, 255, 5));
}

TEST(SmiApi, CppTypesMapToSmiDatatypes) {
    static_assert(incxdp::smi::datatype_of<int32_t>() == SMI_INT);
    static_assert(incxdp::smi::datatype_of<double>() == SMI_DOUBLE);
    static_assert(incxdp::smi::datatype_of<int16_t>() == SMI_SHORT);
    EXPECT_EQ(incxdp::smi::datatype_of<float>(), SMI_FLOAT);
    EXPECT_EQ(incxdp::smi::datatype_of<char>(), SMI_CHAR);
}
