// SPDX-License-Identifier: BSD-2-Clause
// Protocol x carrier (docs/HOSTLIB.md §5): the names users type (carrier
// names and the old transport spellings), the table of valid pairs, the
// protocol taken from the job kind, and the tools' --carrier / --transport.
#include "tool_common.h"

#include <incxdp/communicator.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

using namespace incxdp;

namespace {

const std::string kTopo = INCXDP_SOURCE_DIR "/topo/topologies/";
constexpr Carrier kCarriers[] = {Carrier::Auto, Carrier::Socket, Carrier::AfXdp, Carrier::Verbs};

// The message of the std::invalid_argument `f` throws, or "" if it throws none.
template <typename F> std::string refusal_of(F &&f) {
    try {
        f();
    } catch (const std::invalid_argument &e) {
        return e.what();
    }
    return "";
}

} // namespace

TEST(Carrier, NamesAndOldTransportSpellings) {
    struct Case {
        const char *name;
        std::optional<Protocol> protocol;
        Carrier carrier;
    };
    const Case cases[] = {
        {"auto", std::nullopt, Carrier::Auto},    {"socket", std::nullopt, Carrier::Socket},
        {"af_xdp", std::nullopt, Carrier::AfXdp}, {"verbs", std::nullopt, Carrier::Verbs},
        {"udp", std::nullopt, Carrier::Socket},   {"afxdp", std::nullopt, Carrier::AfXdp},
        {"xdp", std::nullopt, Carrier::AfXdp},    {"roce", Protocol::Roce, Carrier::AfXdp},
    };
    for (const Case &c : cases) {
        CarrierName n = parse_carrier(c.name);
        EXPECT_EQ(n.protocol, c.protocol) << c.name;
        EXPECT_EQ(n.carrier, c.carrier) << c.name;
    }
    for (Carrier c : kCarriers)
        EXPECT_EQ(parse_carrier(to_string(c)).carrier, c) << "to_string round trip";
    std::string why = refusal_of([] { parse_carrier("carrier-pigeon"); });
    EXPECT_NE(why.find("'carrier-pigeon'"), std::string::npos) << why;
    EXPECT_NE(why.find("socket, af_xdp or verbs"), std::string::npos) << why;
    EXPECT_THROW(parse_carrier(""), std::invalid_argument);
    EXPECT_THROW(parse_carrier("AF_XDP"), std::invalid_argument) << "names are lower case";
}

TEST(Carrier, LogNamesArePairs) {
    EXPECT_EQ(to_string(Protocol::Native, Carrier::AfXdp), "native/af_xdp");
    EXPECT_EQ(to_string(Protocol::Native, Carrier::Socket), "native/socket");
    EXPECT_EQ(to_string(Protocol::Roce, Carrier::Verbs), "roce/verbs");
    EXPECT_EQ(to_string(Protocol::Roce, Carrier::Auto), "roce/auto");
    CommConfig c;
    EXPECT_EQ(c.transport_name(), "native/auto") << "the defaults";
}

TEST(Carrier, ValidPairsAndWhyTheOthersAreRefused) {
    for (Carrier c : {Carrier::Auto, Carrier::Socket, Carrier::AfXdp})
        EXPECT_EQ(carrier_refusal(Protocol::Native, c), "") << to_string(c);
    for (Carrier c : {Carrier::Auto, Carrier::AfXdp, Carrier::Verbs})
        EXPECT_EQ(carrier_refusal(Protocol::Roce, c), "") << to_string(c);
    // RoCEv2 over a kernel socket: the ICRC covers the IPv4 ID the kernel picks.
    std::string why = carrier_refusal(Protocol::Roce, Carrier::Socket);
    EXPECT_NE(why.find("roce/socket"), std::string::npos) << why;
    EXPECT_NE(why.find("ICRC covers the IPv4 ID"), std::string::npos) << why;
    EXPECT_NE(why.find("af_xdp"), std::string::npos) << why;
    EXPECT_NE(why.find("verbs"), std::string::npos) << why;
    // An RDMA device carries RC connections, not the native header.
    why = carrier_refusal(Protocol::Native, Carrier::Verbs);
    EXPECT_NE(why.find("native/verbs"), std::string::npos) << why;
    EXPECT_NE(why.find("socket or af_xdp"), std::string::npos) << why;
    EXPECT_NE(why.find("roce-tree"), std::string::npos) << why;
}

TEST(Carrier, ProtocolComesFromTheJobKind) {
    struct Case {
        const char *file;
        Protocol protocol;
    };
    for (const Case &k :
         {Case{"star.yaml", Protocol::Native}, Case{"tree124_udp.yaml", Protocol::Native},
          Case{"tree124.yaml", Protocol::Roce}}) {
        CommConfig c = CommConfig::from_topology(kTopo + k.file, 1, 0);
        EXPECT_EQ(c.protocol, k.protocol) << k.file;
        EXPECT_EQ(c.carrier, Carrier::Auto) << k.file;
        EXPECT_EQ(c.roce_tree(), k.protocol == Protocol::Roce) << k.file;
    }
}

// Every name on a native job and on a roce-tree job: the carrier it picks,
// or the words of its refusal.
TEST(Carrier, UseCarrierOnAJob) {
    struct Case {
        const char *file;
        const char *name;
        std::optional<Carrier> carrier; ///< nullopt: refused
        const char *says = "";
    };
    const Case cases[] = {
        {"star.yaml", "", Carrier::Auto},
        {"star.yaml", "auto", Carrier::Auto},
        {"star.yaml", "socket", Carrier::Socket},
        {"star.yaml", "udp", Carrier::Socket},
        {"star.yaml", "af_xdp", Carrier::AfXdp},
        {"star.yaml", "afxdp", Carrier::AfXdp},
        {"star.yaml", "verbs", std::nullopt, "native/verbs"},
        {"star.yaml", "roce", std::nullopt, "`kind: roce-tree` job"},
        {"tree124_udp.yaml", "socket", Carrier::Socket},
        {"tree124_udp.yaml", "roce", std::nullopt, "a star job or a native tree"},
        {"tree124.yaml", "", Carrier::Auto},
        {"tree124.yaml", "auto", Carrier::Auto},
        {"tree124.yaml", "roce", Carrier::AfXdp},
        {"tree124.yaml", "af_xdp", Carrier::AfXdp},
        {"tree124.yaml", "afxdp", Carrier::AfXdp},
        {"tree124.yaml", "verbs", Carrier::Verbs},
        {"tree124.yaml", "socket", std::nullopt, "ICRC"},
        {"tree124.yaml", "udp", std::nullopt, "roce-tree job"},
    };
    for (const Case &k : cases) {
        CommConfig c = CommConfig::from_topology(kTopo + k.file, 1, 0);
        const Protocol job_protocol = c.protocol;
        const std::string desc = std::string("job 1 of ") + k.file;
        std::string why = refusal_of([&] { c.use_carrier(k.name, desc); });
        EXPECT_EQ(c.protocol, job_protocol) << "the job's protocol stays: " << k.name;
        if (k.carrier) {
            EXPECT_EQ(why, "") << k.file << " " << k.name;
            EXPECT_EQ(c.carrier, *k.carrier) << k.file << " " << k.name;
            EXPECT_NO_THROW(c.validate()) << k.file << " " << k.name;
        } else {
            EXPECT_NE(why.find(desc), std::string::npos) << why;
            EXPECT_NE(why.find(k.says), std::string::npos) << k.name << ": " << why;
            EXPECT_EQ(c.carrier, Carrier::Auto) << "unchanged when refused: " << k.name;
        }
    }
}

// A config built by hand (the C API without a topology): a name that says
// its protocol, or a carrier only one protocol uses, sets it.
TEST(Carrier, UseCarrierWithoutAJobSetsTheProtocolANameImplies) {
    struct Case {
        const char *name;
        Protocol from, to;
        Carrier carrier;
    };
    const Case cases[] = {
        {"roce", Protocol::Native, Protocol::Roce, Carrier::AfXdp},
        {"verbs", Protocol::Native, Protocol::Roce, Carrier::Verbs},
        {"socket", Protocol::Roce, Protocol::Native, Carrier::Socket},
        {"udp", Protocol::Roce, Protocol::Native, Carrier::Socket},
        {"af_xdp", Protocol::Roce, Protocol::Roce, Carrier::AfXdp},
        {"af_xdp", Protocol::Native, Protocol::Native, Carrier::AfXdp},
        {"auto", Protocol::Roce, Protocol::Roce, Carrier::Auto},
    };
    for (const Case &k : cases) {
        CommConfig c;
        c.protocol = k.from;
        c.use_carrier(k.name, "");
        EXPECT_EQ(c.protocol, k.to) << k.name;
        EXPECT_EQ(c.carrier, k.carrier) << k.name;
    }
}

// A pair set directly in the struct is refused by validate() and by the
// Communicator before anything is opened (no root needed to see it).
TEST(Carrier, InvalidPairsAreRefusedBeforeOpening) {
    CommConfig star = CommConfig::from_topology(kTopo + "star.yaml", 1, 0);
    star.carrier = Carrier::Verbs;
    std::string why = refusal_of([&] { star.validate(); });
    EXPECT_NE(why.find("native/verbs"), std::string::npos) << why;
    why = refusal_of([&] { Communicator c(star); });
    EXPECT_NE(why.find("native/verbs"), std::string::npos) << why;

    CommConfig tree = CommConfig::from_topology(kTopo + "tree124.yaml", 1, 0);
    tree.carrier = Carrier::Socket;
    why = refusal_of([&] { Communicator c(tree); });
    EXPECT_NE(why.find("roce/socket"), std::string::npos) << why;
}

TEST(Carrier, ToolsTakeCarrierAndTheOldTransportFlag) {
    auto parse = [](std::vector<std::string> args) {
        tools::BootstrapOptions o;
        CLI::App app;
        tools::add_bootstrap_options(app, o);
        args.insert(args.begin(), {"--rank", "0"});
        std::reverse(args.begin(), args.end()); // CLI11 takes argv reversed
        app.parse(args);
        return o;
    };
    const std::string star = kTopo + "star.yaml", tree = kTopo + "tree124.yaml";
    EXPECT_EQ(tools::make_config(parse({"--topo", star, "--carrier", "socket"})).carrier,
              Carrier::Socket);
    EXPECT_EQ(tools::make_config(parse({"--topo", star, "--transport", "udp"})).carrier,
              Carrier::Socket);
    EXPECT_EQ(tools::make_config(parse({"--topo", star, "--transport", "afxdp"})).carrier,
              Carrier::AfXdp);
    CommConfig c = tools::make_config(parse({"--topo", tree, "--carrier", "verbs"}));
    EXPECT_EQ(c.transport_name(), "roce/verbs");
    c = tools::make_config(parse({"--topo", tree, "--transport", "roce"}));
    EXPECT_EQ(c.transport_name(), "roce/af_xdp");
    c = tools::make_config(parse({"--topo", tree}));
    EXPECT_EQ(c.transport_name(), "roce/auto");
    EXPECT_THROW(tools::make_config(parse({"--topo", tree, "--carrier", "socket"})),
                 std::invalid_argument);
    EXPECT_THROW(tools::make_config(parse({"--topo", star, "--carrier", "verbs"})),
                 std::invalid_argument);
    EXPECT_THROW(parse({"--topo", star, "--carrier", "socket", "--transport", "udp"}),
                 CLI::ExcludesError);
    EXPECT_THROW(parse({"--topo", star, "--carrier", "udp"}), CLI::ValidationError)
        << "--carrier takes the carrier names only";
}
