// SPDX-License-Identifier: BSD-2-Clause
// The mesh daemon's state file (JSON) and `incxdp mesh show`'s rendering of it.
#include "mesh_daemon.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>

namespace incxdp::mesh {

using nlohmann::json;

std::string state_path(const std::string &pin_dir) {
    std::string p = pin_dir;
    while (p.size() > 1 && p.back() == '/')
        p.pop_back();
    if (p.empty() || p[0] != '/')
        p = "/" + p;
    return "/run/incxdp/mesh" + p + "/mesh.json";
}

static json ips(const std::vector<uint32_t> &addrs) {
    json j = json::array();
    for (uint32_t a : addrs)
        j.push_back(ip_str(a));
    return j;
}

json state_json(const DaemonView &v) {
    json j;
    j["node_id"] = id_str(v.self);
    j["addresses"] = ips(v.addrs);
    j["topology"] = v.topology;
    j["relay_attached"] = v.relay_attached;
    j["pid"] = ::getpid();
    j["last_change_unix_ms"] = v.last_change_unix_ms;
    j["errors"] = v.errors;
    const Knobs &k = *v.knobs;
    j["knobs"] = {{"ifaces", k.ifaces.empty() ? json("all") : json(k.ifaces)},
                  {"pin_dir", k.pin_dir},
                  {"relay", k.relay ? "on" : "off"},
                  {"max_hops", k.max_hops},
                  {"topology", topo_override_name(k.topology)},
                  {"mode", k.mode},
                  {"source", k.source}};
    j["timers_ms"] = {{"hello", v.timers.hello_ms},
                      {"dead", v.timers.dead_ms},
                      {"lsa_refresh", v.timers.lsa_refresh_ms},
                      {"lsa_max_age", v.timers.lsa_max_age_ms}};

    j["interfaces"] = json::array();
    for (const LocalIface &i : *v.ifaces)
        j["interfaces"].push_back({{"name", i.name},
                                   {"ifindex", i.ifindex},
                                   {"addr", fmt::format("{}/{}", ip_str(i.addr), i.prefix_len)},
                                   {"broadcast", ip_str(i.bcast)},
                                   {"mac", topo::mac_to_string(i.mac)},
                                   {"up", i.up}});

    j["neighbours"] = json::array();
    for (const Neighbour &n : *v.neighbours)
        j["neighbours"].push_back({{"node", id_str(n.node)},
                                   {"iface", (*v.ifaces)[n.iface].name},
                                   {"addr", ip_str(n.addr)},
                                   {"mac", topo::mac_to_string(n.mac)},
                                   {"addresses", ips(n.addrs)},
                                   {"last_hello_ms_ago", v.now_ms - n.last_ms},
                                   {"up_for_ms", v.now_ms - n.since_ms}});

    auto addrs_of = [&](NodeId id) {
        const Lsdb::Entry *e = v.lsdb->find(id);
        return e ? ips(e->lsa.addrs) : json::array();
    };
    j["lsdb"] = json::array();
    for (const auto &[id, e] : v.lsdb->entries()) {
        json links = json::array();
        for (const LinkInfo &l : e.lsa.links)
            links.push_back({{"node", id_str(l.node)},
                             {"local_addr", ip_str(l.local_addr)},
                             {"peer_addr", ip_str(l.peer_addr)}});
        j["lsdb"].push_back({{"origin", id_str(id)},
                             {"seq", e.lsa.seq},
                             {"age_ms", v.now_ms - e.updated_ms},
                             {"addresses", ips(e.lsa.addrs)},
                             {"links", links}});
    }

    j["routes"] = json::array();
    for (const auto &[dst, r] : v.routes->routes) {
        json nhs = json::array(), paths = json::array();
        for (NodeId first : r.first_hops) {
            json nh = {{"node", id_str(first)}};
            for (const Neighbour &n : *v.neighbours)
                if (n.node == first) {
                    nh["iface"] = (*v.ifaces)[n.iface].name;
                    nh["addr"] = ip_str(n.addr);
                    nh["mac"] = topo::mac_to_string(n.mac);
                    break;
                }
            nhs.push_back(nh);
        }
        for (const auto &p : r.paths) {
            json path = json::array();
            for (NodeId n : p)
                path.push_back({{"node", id_str(n)}, {"addresses", addrs_of(n)}});
            paths.push_back(path);
        }
        j["routes"].push_back({{"dst", id_str(dst)},
                               {"dst_addresses", addrs_of(dst)},
                               {"hops", r.hops},
                               {"next_hops", nhs},
                               {"paths", paths}});
    }
    j["unreachable"] = json::array();
    for (NodeId n : v.routes->disconnected)
        j["unreachable"].push_back({{"node", id_str(n)}, {"reason", "disconnected"}});
    for (const auto &[n, hops] : v.routes->too_far)
        j["unreachable"].push_back(
            {{"node", id_str(n)}, {"reason", fmt::format("{} hops > max_hops", hops)}});
    return j;
}

void write_state(const std::string &path, const json &j) {
    const std::filesystem::path p(path);
    std::error_code ec;
    std::filesystem::create_directories(p.parent_path(), ec);
    if (ec)
        throw MeshError(fmt::format("state file: cannot create {}: {}", p.parent_path().string(),
                                    ec.message()));
    const std::string tmp = path + ".tmp";
    const std::string text = j.dump(2) + "\n";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        throw MeshError(fmt::format("state file: cannot create {}: {}", tmp, std::strerror(errno)));
    const ssize_t n = ::write(fd, text.data(), text.size());
    const int err = errno;
    ::close(fd);
    if (n != static_cast<ssize_t>(text.size()))
        throw MeshError(fmt::format("state file: writing {}: {}", tmp, std::strerror(err)));
    if (::rename(tmp.c_str(), path.c_str()) != 0)
        throw MeshError(
            fmt::format("state file: renaming {} to {}: {}", tmp, path, std::strerror(errno)));
}

// "0x1234abcd (10.0.0.1,10.0.1.1)"
static std::string node_label(const json &node) {
    std::string s = node.at("node").get<std::string>();
    const auto &a = node.at("addresses");
    if (!a.empty()) {
        std::string list;
        for (const auto &x : a)
            list += (list.empty() ? "" : ",") + x.get<std::string>();
        s += " (" + list + ")";
    }
    return s;
}

std::string format_show(const json &s) {
    std::string out;
    std::string addrs;
    for (const auto &a : s.at("addresses"))
        addrs += (addrs.empty() ? "" : " ") + a.get<std::string>();
    const auto &k = s.at("knobs");
    out += fmt::format("node      {}  {}\n", s.at("node_id").get<std::string>(), addrs);
    out += fmt::format("topology  {}\n", s.at("topology").get<std::string>());
    out += fmt::format("knobs     relay {}  max-hops {}  topology {}  mode {}  pin-dir {}\n",
                       k.at("relay").get<std::string>(), k.at("max_hops").get<uint32_t>(),
                       k.at("topology").get<std::string>(), k.at("mode").get<std::string>(),
                       k.at("pin_dir").get<std::string>());
    out += "neighbours\n";
    for (const auto &n : s.at("neighbours"))
        out += fmt::format("  {:<10}  on {:<8} {:<15} {}\n", n.at("node").get<std::string>(),
                           n.at("iface").get<std::string>(), n.at("addr").get<std::string>(),
                           n.at("mac").get<std::string>());
    out +=
        fmt::format("routes\n  {:<10}  {:>4}  {:<32}  {}\n", "dst", "hops", "next hops", "paths");
    for (const auto &r : s.at("routes")) {
        std::string nhs;
        for (const auto &nh : r.at("next_hops"))
            nhs += (nhs.empty() ? "" : " ") + nh.at("node").get<std::string>() +
                   (nh.contains("iface") ? "@" + nh.at("iface").get<std::string>() : "");
        bool first = true;
        for (const auto &p : r.at("paths")) {
            std::string path;
            for (const auto &n : p)
                path += (path.empty() ? "" : " > ") + node_label(n);
            if (first)
                out += fmt::format("  {:<10}  {:>4}  {:<32}  {}\n", r.at("dst").get<std::string>(),
                                   r.at("hops").get<uint32_t>(), nhs, path);
            else
                out += fmt::format("  {:<10}  {:>4}  {:<32}  {}\n", "", "", "", path);
            first = false;
        }
    }
    for (const auto &u : s.at("unreachable"))
        out += fmt::format("unreachable {}: {}\n", u.at("node").get<std::string>(),
                           u.at("reason").get<std::string>());
    for (const auto &e : s.at("errors"))
        out += fmt::format("error     {}\n", e.get<std::string>());
    return out;
}

} // namespace incxdp::mesh
