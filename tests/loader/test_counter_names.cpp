// SPDX-License-Identifier: BSD-2-Clause
// The counters' names are an interface: `incxdp stats -j` and `incxdp chaos
// -j` print them and scripts and tests read them by name. Both tables are
// generated from the X-macro lists in maps.h and chaos.h; these cases check
// that every index gets its own enumerator's name, across the split of the
// engine's list at INCXDP_STAT_INGRESS_VERDICTS, and that chaos counters
// survive their JSON form field by field. No kernel.
#include <incxdp/chaos_ctl.h>
#include <incxdp/ctl.h>

#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

namespace incxdp::ctl {
namespace {

TEST(StatNames, EveryCounterHasItsOwnLowerCaseName) {
    std::set<std::string> seen;
    for (uint32_t i = 0; i < INCXDP_STAT_MAX; i++) {
        const std::string name = stat_name(static_cast<incxdp_stat>(i));
        ASSERT_FALSE(name.empty()) << "counter " << i;
        for (char c : name)
            EXPECT_TRUE(std::islower(static_cast<unsigned char>(c)) || c == '_') << name;
        EXPECT_TRUE(seen.insert(name).second) << "counter " << i << " repeats " << name;
    }
    EXPECT_STREQ(stat_name(INCXDP_STAT_MAX), "?");
}

TEST(StatNames, NamesSitAtTheirEnumeratorsOnBothSidesOfTheVerdicts) {
    EXPECT_STREQ(stat_name(INCXDP_STAT_PASS), "pass");
    EXPECT_STREQ(stat_name(INCXDP_STAT_RETX_UNICAST), "retx_unicast");
    EXPECT_STREQ(stat_name(INCXDP_STAT_ROCE_MALFORMED), "roce_malformed");
    EXPECT_STREQ(stat_name(INCXDP_STAT_ROCE_LATE_ACK), "roce_late_ack");
    EXPECT_STREQ(stat_name(INCXDP_STAT_ROCE_BAD_CSUM), "roce_bad_csum");
    // The first counter after the verdicts takes INGRESS_VERDICTS' index.
    EXPECT_EQ(static_cast<int>(INCXDP_STAT_REDIRECT_FAIL),
              static_cast<int>(INCXDP_STAT_INGRESS_VERDICTS));
    EXPECT_STREQ(stat_name(INCXDP_STAT_REDIRECT_FAIL), "redirect_fail");
    EXPECT_STREQ(stat_name(INCXDP_STAT_EGRESS_TX), "egress_tx");
    EXPECT_STREQ(stat_name(INCXDP_STAT_PULLED), "pulled");
    EXPECT_EQ(INCXDP_STAT_PULLED + 1, INCXDP_STAT_MAX);
}

TEST(ChaosCounterNames, JsonCarriesEveryCounterUnderItsNameAndBack) {
    chaos::HookStatus s;
    s.iface = "veA";
    uint64_t v = 100;
#define SET_DISTINCT(NAME, name, what) s.counters.name = v++;
    INCXDP_CHAOS_STATS(SET_DISTINCT)
#undef SET_DISTINCT
    const nlohmann::json j = chaos::to_json(s);
    const nlohmann::json &c = j.at("counters");
    EXPECT_EQ(c.size(), static_cast<size_t>(INCXDP_CHAOS_STAT_MAX));
    EXPECT_EQ(c.at("seen").get<uint64_t>(), 100u);
    EXPECT_EQ(c.at("dup_failed").get<uint64_t>(), 100u + INCXDP_CHAOS_DUP_FAILED);
    EXPECT_EQ(c.at("reflected").get<uint64_t>(), 100u + INCXDP_CHAOS_REFLECTED);

    const chaos::HookStatus back = chaos::hook_status_from_json(j);
#define CHECK_FIELD(NAME, name, what) EXPECT_EQ(back.counters.name, s.counters.name) << #name;
    INCXDP_CHAOS_STATS(CHECK_FIELD)
#undef CHECK_FIELD
}

} // namespace
} // namespace incxdp::ctl
