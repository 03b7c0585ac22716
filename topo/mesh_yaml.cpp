// SPDX-License-Identifier: BSD-2-Clause
// `kind: mesh` files: read into a MeshSpec, built by build_mesh_checked(),
// whose problems come back here to be reported at the line of the key.
#include "mesh_detail.h"

#include <fmt/format.h>

#include <map>
#include <utility>

namespace incxdp::topo::detail {
namespace {

constexpr const char *kLinkKeys[] = {"subnet",  "a_ip",  "b_ip", "a_iface",
                                     "b_iface", "a_mac", "b_mac"};

// Where each spec value came from, to point at it.
using Origins = std::map<std::pair<size_t, std::string>, YAML::Node>;

std::string &link_field(MeshLinkSpec &l, const std::string &key) {
    if (key == "subnet")
        return l.subnet;
    if (key == "a_ip")
        return l.a_ip;
    if (key == "b_ip")
        return l.b_ip;
    if (key == "a_iface")
        return l.a_iface;
    if (key == "b_iface")
        return l.b_iface;
    if (key == "a_mac")
        return l.a_mac;
    return l.b_mac;
}

// Keys of a switched topology, refused with the reason rather than as unknown.
void refuse_switched_keys(const YamlReader &r, const YAML::Node &root) {
    const std::pair<const char *, const char *> why[] = {
        {"switches", "a mesh has no switches: its hosts are cabled to each other"},
        {"subnet", "a mesh has no shared subnet: each link has its own (link_subnet, or subnet "
                   "on the link)"},
        {"jobs", "jobs run on switches, and a mesh has none"}};
    for (const auto &kv : root)
        for (const auto &[key, reason] : why)
            if (kv.first.IsScalar() && kv.first.Scalar() == key)
                r.fail(kv.first, "", fmt::format("'{}' is not allowed in a mesh: {}", key, reason));
}

void read_hosts(const YamlReader &r, const YAML::Node &list, MeshSpec &spec) {
    r.expect_seq(list, "hosts");
    for (size_t i = 0; i < list.size(); ++i) {
        const YAML::Node h = list[i];
        const std::string where = fmt::format("hosts[{}]", i);
        if (h.IsMap() && h["ip"].IsDefined())
            r.fail(h["ip"], where,
                   "a mesh host has no single address: each end of a link has its own "
                   "(a_ip, b_ip)");
        r.expect_map(h, where, {"name", "iface", "mac"});
        spec.hosts.push_back(r.str(h, "name", where));
    }
}

void read_links(const YamlReader &r, const YAML::Node &list, MeshSpec &spec, Origins &from) {
    r.expect_seq(list, "links");
    for (size_t i = 0; i < list.size(); ++i) {
        const YAML::Node l = list[i];
        const std::string where = fmt::format("links[{}]", i);
        MeshLinkSpec s;
        if (l.IsSequence() && l.size() == 2) {
            s.a = r.scalar(l[0], where);
            s.b = r.scalar(l[1], where);
            from[{i, "a"}] = l[0];
            from[{i, "b"}] = l[1];
        } else if (l.IsMap()) {
            r.expect_map(
                l, where,
                {"a", "b", "subnet", "a_ip", "b_ip", "a_iface", "b_iface", "a_mac", "b_mac"});
            s.a = r.str(l, "a", where);
            s.b = r.str(l, "b", where);
            from[{i, "a"}] = l["a"];
            from[{i, "b"}] = l["b"];
            for (const char *key : kLinkKeys)
                if (l[key].IsDefined() && !l[key].IsNull()) {
                    link_field(s, key) = r.scalar(l[key], where + "." + key);
                    from[{i, key}] = l[key];
                }
        } else {
            r.fail(l, where,
                   "expected a pair of host names, e.g. [n0, n1], or a mapping {a: n0, b: n1, "
                   "...}");
        }
        spec.links.push_back(std::move(s));
    }
}

// `iface:`/`mac:` on a host name the interface of its one link.
void apply_host_keys(const YamlReader &r, const YAML::Node &hosts, MeshSpec &spec, Origins &from) {
    for (size_t i = 0; i < spec.hosts.size(); ++i) {
        const YAML::Node h = hosts[i];
        const std::string &name = spec.hosts[i];
        const std::string where = fmt::format("hosts[{}] ({})", i, name);
        for (const char *key : {"iface", "mac"}) {
            const YAML::Node v = h[key];
            if (!v.IsDefined() || v.IsNull())
                continue;
            std::vector<std::pair<size_t, bool>> ends; // link, end a
            for (size_t j = 0; j < spec.links.size(); ++j) {
                if (spec.links[j].a == name)
                    ends.emplace_back(j, true);
                if (spec.links[j].b == name)
                    ends.emplace_back(j, false);
            }
            if (ends.size() != 1)
                r.fail(v, where,
                       fmt::format("{} on a host needs exactly one link; '{}' has {} (set "
                                   "a_{}/b_{} on its links instead)",
                                   key, name, ends.size(), key, key));
            const auto [j, a] = ends[0];
            const std::string field = std::string(a ? "a_" : "b_") + key;
            if (from.count({j, field}))
                r.fail(v, where,
                       fmt::format("{} is given twice: here and as links[{}].{}", key, j, field));
            link_field(spec.links[j], field) = r.scalar(v, where + "." + key);
            from[{j, field}] = v;
        }
    }
}

} // namespace

bool is_mesh(const YamlReader &r, const YAML::Node &root) {
    if (!root.IsMap())
        return false;
    const YAML::Node k = root["kind"];
    if (!k.IsDefined() || k.IsNull())
        return false;
    const std::string s = r.scalar(k, "kind");
    if (s == "mesh")
        return true;
    if (s == "switched")
        return false;
    r.fail(k, "kind", fmt::format("unknown topology kind '{}' (expected switched or mesh)", s));
}

Topology parse_mesh(const YamlReader &r, const YAML::Node &root) {
    refuse_switched_keys(r, root);
    r.expect_map(root, "", {"name", "kind", "link_subnet", "mtu", "hosts", "links"});
    MeshSpec spec;
    spec.name = r.str(root, "name", "");
    if (root["link_subnet"].IsDefined())
        spec.link_subnet = r.str(root, "link_subnet", "");
    spec.mtu = parse_mtu(r, root);
    for (const char *key : {"hosts", "links"})
        if (!root[key].IsDefined() || root[key].IsNull())
            r.fail(root, "", fmt::format("missing required key '{}'", key));
    Origins from;
    read_hosts(r, root["hosts"], spec);
    read_links(r, root["links"], spec, from);
    apply_host_keys(r, root["hosts"], spec, from);
    return build_mesh_checked(spec, [&](const MeshWhere &w, const std::string &msg) {
        const std::string where = mesh_where_string(spec, w);
        switch (w.part) {
        case MeshWhere::Part::Top: {
            const YAML::Node v = root[w.key];
            r.fail(v.IsDefined() ? v : root, where, msg);
        }
        case MeshWhere::Part::Host: {
            const YAML::Node h = root["hosts"][w.index];
            if (!w.key.empty() && h[w.key].IsDefined())
                r.fail(h[w.key], where, msg);
            r.fail(h, where, msg);
        }
        case MeshWhere::Part::Link: {
            const auto it = from.find({w.index, w.key});
            r.fail(it != from.end() ? it->second : root["links"][w.index], where, msg);
        }
        }
    });
}

} // namespace incxdp::topo::detail
