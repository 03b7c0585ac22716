// SPDX-License-Identifier: BSD-2-Clause
#include "mesh_config.h"

#include "yaml_reader.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

namespace incxdp::mesh {

bool parse_on_off(const std::string &s, const std::string &what) {
    if (s == "on" || s == "1" || s == "true" || s == "yes")
        return true;
    if (s == "off" || s == "0" || s == "false" || s == "no")
        return false;
    throw MeshError(fmt::format("{}: '{}' is not on or off", what, s));
}

uint32_t parse_max_hops(const std::string &s, const std::string &what) {
    size_t used = 0;
    unsigned long v = 0;
    try {
        v = std::stoul(s, &used);
    } catch (const std::exception &) {
        used = 0;
    }
    if (used == 0 || used != s.size() || v < 1 || v > 255)
        throw MeshError(fmt::format("{}: '{}' is not a hop count in 1..255", what, s));
    return static_cast<uint32_t>(v);
}

std::string parse_mode(const std::string &s, const std::string &what) {
    if (s != "native" && s != "skb")
        throw MeshError(fmt::format("{}: '{}' is not native or skb", what, s));
    return s;
}

std::vector<std::string> parse_iface_list(const std::string &s) {
    std::vector<std::string> out;
    if (s == "all")
        return out;
    std::stringstream ss(s);
    std::string item;
    while (std::getline(ss, item, ','))
        if (!item.empty())
            out.push_back(item);
    return out;
}

KnobSet knobs_from_env(const std::function<const char *(const char *)> &getenv) {
    KnobSet k;
    if (const char *v = getenv("INCXDP_MESH_RELAY"))
        k.relay = parse_on_off(v, "INCXDP_MESH_RELAY");
    if (const char *v = getenv("INCXDP_MESH_MAX_HOPS"))
        k.max_hops = parse_max_hops(v, "INCXDP_MESH_MAX_HOPS");
    if (const char *v = getenv("INCXDP_MESH_TOPOLOGY")) {
        try {
            k.topology = parse_topo_override(v);
        } catch (const MeshError &e) {
            throw MeshError(std::string("INCXDP_MESH_TOPOLOGY: ") + e.what());
        }
    }
    if (const char *v = getenv("INCXDP_MESH_PIN_DIR"); v && *v)
        k.pin_dir = v;
    return k;
}

KnobSet knobs_from_yaml(const std::string &text, const std::string &source) {
    topo::detail::YamlReader r(source);
    YAML::Node root;
    try {
        root = YAML::Load(text);
    } catch (const YAML::Exception &e) {
        throw MeshError(fmt::format("{}: {}", source, e.what()));
    }
    KnobSet k;
    if (root.IsNull())
        return k;
    auto where = [&](const char *key) { return fmt::format("{}: {}", source, key); };
    try {
        r.expect_map(root, "mesh config",
                     {"ifaces", "pin-dir", "relay", "max-hops", "topology", "mode"});
        if (auto n = root["ifaces"]) {
            if (n.IsScalar()) {
                k.ifaces = parse_iface_list(n.as<std::string>());
            } else {
                r.expect_seq(n, "ifaces");
                std::vector<std::string> v;
                for (size_t i = 0; i < n.size(); i++)
                    v.push_back(r.scalar(n[i], fmt::format("ifaces[{}]", i)));
                k.ifaces = v;
            }
        }
        if (auto n = root["pin-dir"])
            k.pin_dir = r.scalar(n, "pin-dir");
        if (auto n = root["relay"])
            k.relay = parse_on_off(r.scalar(n, "relay"), where("relay"));
        if (auto n = root["max-hops"])
            k.max_hops = parse_max_hops(r.scalar(n, "max-hops"), where("max-hops"));
        if (auto n = root["topology"]) {
            try {
                k.topology = parse_topo_override(r.scalar(n, "topology"));
            } catch (const MeshError &e) {
                throw MeshError(fmt::format("{}: {}", where("topology"), e.what()));
            }
        }
        if (auto n = root["mode"])
            k.mode = parse_mode(r.scalar(n, "mode"), where("mode"));
    } catch (const topo::TopologyError &e) {
        throw MeshError(e.what());
    }
    return k;
}

KnobSet knobs_from_file(const std::string &path) {
    std::ifstream in(path);
    if (!in)
        throw MeshError(fmt::format("mesh config '{}': cannot open it", path));
    std::stringstream ss;
    ss << in.rdbuf();
    return knobs_from_yaml(ss.str(), path);
}

template <typename T>
static T pick(const char *name, const std::optional<T> &flag, const std::optional<T> &env,
              const std::optional<T> &file, T def, std::map<std::string, std::string> &source) {
    if (flag) {
        source[name] = "flag";
        return *flag;
    }
    if (env) {
        source[name] = "env";
        return *env;
    }
    if (file) {
        source[name] = "file";
        return *file;
    }
    source[name] = "default";
    return def;
}

Knobs resolve_knobs(const KnobSet &flags, const KnobSet &env, const KnobSet &file,
                    const std::string &default_pin_dir) {
    Knobs k;
    k.ifaces = pick<std::vector<std::string>>("ifaces", flags.ifaces, env.ifaces, file.ifaces, {},
                                              k.source);
    k.pin_dir =
        pick("pin_dir", flags.pin_dir, env.pin_dir, file.pin_dir, default_pin_dir, k.source);
    k.relay = pick("relay", flags.relay, env.relay, file.relay, true, k.source);
    k.max_hops =
        pick<uint32_t>("max_hops", flags.max_hops, env.max_hops, file.max_hops, 4u, k.source);
    k.topology =
        pick("topology", flags.topology, env.topology, file.topology, TopoOverride::Auto, k.source);
    k.mode = pick<std::string>("mode", flags.mode, env.mode, file.mode, "native", k.source);
    return k;
}

} // namespace incxdp::mesh
