// SPDX-License-Identifier: BSD-2-Clause
// Topology tests build their cases by editing one base YAML text.
#pragma once

#include <incxdp/topology.h>

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace incxdp::test {

/// The whole file (e.g. a shipped topology to edit); "" if it cannot be read.
inline std::string read_text(const std::string &path)
{
    std::ifstream f(path);
    std::stringstream s;
    s << f.rdbuf();
    return s.str();
}

/// `s` with the first `from` replaced by `to`; a missing `from` fails the test.
inline std::string with(std::string s, const std::string &from, const std::string &to)
{
    const auto pos = s.find(from);
    EXPECT_NE(pos, std::string::npos) << "test bug: '" << from << "' not in base";
    if (pos != std::string::npos)
        s.replace(pos, from.size(), to);
    return s;
}

/// The error message of parsing `yaml`, or "" if it parsed.
inline std::string parse_error(const std::string &yaml)
{
    try {
        topo::Topology::parse(yaml);
    } catch (const topo::TopologyError &e) {
        return e.what();
    }
    return "";
}

} // namespace incxdp::test
