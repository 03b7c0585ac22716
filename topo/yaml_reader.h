// SPDX-License-Identifier: BSD-2-Clause
// Typed access to a yaml-cpp tree that turns every problem into a one-line
// TopologyError naming the file, the line:column and the entry, e.g.
//   star.yaml:14:5: links[2]: unknown node 'w9'
// Internal to incxdp_topo.
#pragma once

#include "incxdp/topology.h"

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <initializer_list>
#include <string>

namespace incxdp::topo::detail {

class YamlReader {
  public:
    explicit YamlReader(std::string source) : source_(std::move(source)) {}

    const std::string &source() const { return source_; }

    // Throws "<source>:<line>:<col>: <where>: <msg>"; the position is left
    // out when the node has none (a missing key has no mark of its own).
    [[noreturn]] void fail(const YAML::Node &at, const std::string &where,
                           const std::string &msg) const;

    // A mapping whose keys are all in `allowed`, each once: catches typos
    // such as `worker_prot`, which yaml-cpp would otherwise ignore.
    void expect_map(const YAML::Node &n, const std::string &where,
                    std::initializer_list<const char *> allowed) const;
    // A sequence (a missing optional key reads as an empty one).
    void expect_seq(const YAML::Node &n, const std::string &where) const;

    // Required scalar value of `key` in mapping `map`.
    std::string str(const YAML::Node &map, const char *key, const std::string &where) const;
    // Integer value of `key` in [lo, hi], or `def` when the key is absent.
    int64_t integer(const YAML::Node &map, const char *key, const std::string &where, int64_t def,
                    int64_t lo, int64_t hi) const;
    // Required integer value of `key` in [lo, hi].
    int64_t integer(const YAML::Node &map, const char *key, const std::string &where, int64_t lo,
                    int64_t hi) const;
    // A scalar sequence element or list entry.
    std::string scalar(const YAML::Node &n, const std::string &where) const;

  private:
    int64_t to_integer(const YAML::Node &n, const std::string &where, int64_t lo, int64_t hi) const;

    std::string source_;
};

} // namespace incxdp::topo::detail
