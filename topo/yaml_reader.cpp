// SPDX-License-Identifier: BSD-2-Clause
#include "yaml_reader.h"

#include <fmt/format.h>

#include <set>

namespace incxdp::topo::detail {

void YamlReader::fail(const YAML::Node &at, const std::string &where,
                      const std::string &msg) const {
    std::string pos;
    if (at.IsDefined()) {
        const YAML::Mark m = at.Mark();
        if (!m.is_null())
            pos = fmt::format(":{}:{}", m.line + 1, m.column + 1);
    }
    if (where.empty())
        throw TopologyError(fmt::format("{}{}: {}", source_, pos, msg));
    throw TopologyError(fmt::format("{}{}: {}: {}", source_, pos, where, msg));
}

void YamlReader::expect_map(const YAML::Node &n, const std::string &where,
                            std::initializer_list<const char *> allowed) const {
    if (!n.IsMap())
        fail(n, where, "expected a mapping");
    std::set<std::string> seen;
    for (const auto &kv : n) {
        if (!kv.first.IsScalar())
            fail(kv.first, where, "keys must be plain names");
        const std::string key = kv.first.Scalar();
        bool known = false;
        for (const char *a : allowed)
            known = known || key == a;
        if (!known) {
            std::string list;
            for (const char *a : allowed)
                list += (list.empty() ? "" : ", ") + std::string(a);
            fail(kv.first, where, fmt::format("unknown key '{}' (expected one of: {})", key, list));
        }
        if (!seen.insert(key).second)
            fail(kv.first, where, fmt::format("duplicate key '{}'", key));
    }
}

void YamlReader::expect_seq(const YAML::Node &n, const std::string &where) const {
    if (n.IsDefined() && !n.IsNull() && !n.IsSequence())
        fail(n, where, "expected a list");
}

std::string YamlReader::str(const YAML::Node &map, const char *key,
                            const std::string &where) const {
    const YAML::Node v = map[key];
    if (!v.IsDefined() || v.IsNull())
        fail(map, where, fmt::format("missing required key '{}'", key));
    return scalar(v, where.empty() ? key : where + "." + key);
}

std::string YamlReader::scalar(const YAML::Node &n, const std::string &where) const {
    if (!n.IsScalar())
        fail(n, where, "expected a single value, not a list or mapping");
    return n.Scalar();
}

int64_t YamlReader::to_integer(const YAML::Node &n, const std::string &where, int64_t lo,
                               int64_t hi) const {
    const std::string s = scalar(n, where);
    int64_t v = 0;
    try {
        v = n.as<int64_t>();
    } catch (const YAML::Exception &) {
        fail(n, where, fmt::format("'{}' is not an integer", s));
    }
    if (v < lo || v > hi)
        fail(n, where, fmt::format("{} is out of range [{}, {}]", v, lo, hi));
    return v;
}

int64_t YamlReader::integer(const YAML::Node &map, const char *key, const std::string &where,
                            int64_t def, int64_t lo, int64_t hi) const {
    const YAML::Node v = map[key];
    if (!v.IsDefined() || v.IsNull())
        return def;
    return to_integer(v, where.empty() ? key : where + "." + key, lo, hi);
}

int64_t YamlReader::integer(const YAML::Node &map, const char *key, const std::string &where,
                            int64_t lo, int64_t hi) const {
    const YAML::Node v = map[key];
    if (!v.IsDefined() || v.IsNull())
        fail(map, where, fmt::format("missing required key '{}'", key));
    return to_integer(v, where.empty() ? key : where + "." + key, lo, hi);
}

} // namespace incxdp::topo::detail
