// SPDX-License-Identifier: BSD-2-Clause
// SMI cabling files: parsing both formats, ranks, the mesh Topology.
#include "incxdp/smi_topology.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace incxdp::topo::smi {
namespace {

struct RawCable {
    std::string a_fpga, b_fpga;
    int a_ch = -1, b_ch = -1;
    std::string where; // "line 3" or "connections[\"...\"]"
};

constexpr size_t kMaxHostName = 12; // topo's node name limit

[[noreturn]] void fail(const std::string &source, const std::string &where,
                       const std::string &msg) {
    throw TopologyError(fmt::format("{}: {}: {}", source, where, msg));
}

std::string trim(const std::string &s) {
    size_t b = s.find_first_not_of(" \t\r\n");
    if (b == std::string::npos)
        return "";
    size_t e = s.find_last_not_of(" \t\r\n");
    return s.substr(b, e - b + 1);
}

// "fpga-0001:acl0" : exactly one ':' with non-empty sides.
bool valid_fpga(const std::string &f) {
    size_t c = f.find(':');
    return c != std::string::npos && c > 0 && c + 1 < f.size() &&
           f.find(':', c + 1) == std::string::npos &&
           std::all_of(f.begin(), f.end(), [](unsigned char ch) { return std::isgraph(ch); });
}

// "fpga-0001:acl0:ch1" -> ("fpga-0001:acl0", 1)
void parse_port(const std::string &port, std::string &fpga, int &ch, const std::string &source,
                const std::string &where) {
    size_t c = port.rfind(':');
    if (c == std::string::npos)
        fail(source, where, fmt::format("'{}' is not a port (expected node:fpga:chN)", port));
    fpga = port.substr(0, c);
    std::string chs = port.substr(c + 1);
    if (!valid_fpga(fpga))
        fail(source, where, fmt::format("'{}' is not a port (expected node:fpga:chN)", port));
    if (chs.size() != 3 || chs.compare(0, 2, "ch") != 0 || chs[2] < '0' || chs[2] >= '0' + kQsfps)
        fail(source, where, fmt::format("'{}': QSFP '{}' is not ch0..ch{}", port, chs, kQsfps - 1));
    ch = chs[2] - '0';
}

Cabling assemble(std::set<std::string> fpga_set, const std::map<std::string, std::string> &programs,
                 const std::vector<RawCable> &raw, const std::string &source, bool fpgas_listed) {
    for (const RawCable &r : raw)
        for (const std::string *f : {&r.a_fpga, &r.b_fpga})
            if (!fpga_set.count(*f)) {
                if (fpgas_listed)
                    fail(source, r.where, fmt::format("FPGA '{}' is not in \"fpgas\"", *f));
                fpga_set.insert(*f);
            }
    if (fpga_set.empty())
        fail(source, "fpgas", "no FPGA");
    if (fpga_set.size() > static_cast<size_t>(kMaxRanks))
        fail(source, "fpgas",
             fmt::format("{} FPGAs: at most {} ranks", fpga_set.size(), kMaxRanks));
    Cabling c;
    c.source = source;
    c.fpgas.assign(fpga_set.begin(), fpga_set.end()); // std::set: sorted by name
    for (const std::string &f : c.fpgas) {
        auto it = programs.find(f);
        c.programs.push_back(it == programs.end() ? "" : it->second);
    }
    std::set<std::string> hosts;
    for (const std::string &f : c.fpgas)
        if (host_name(f).size() > kMaxHostName)
            fail(source, "fpgas",
                 fmt::format("FPGA '{}' makes the namespace name '{}', longer than {} characters",
                             f, host_name(f), kMaxHostName));
        else if (!hosts.insert(host_name(f)).second)
            fail(source, "fpgas",
                 fmt::format("two FPGAs map to the namespace name '{}'", host_name(f)));
    c.cable_at.assign(c.fpgas.size(), {-1, -1, -1, -1});
    for (const RawCable &r : raw) {
        Cable cab{{c.rank_of(r.a_fpga), r.a_ch}, {c.rank_of(r.b_fpga), r.b_ch}};
        if (cab.a.rank == cab.b.rank && cab.a.ch == cab.b.ch)
            fail(source, r.where, fmt::format("cable from {}:ch{} to itself", r.a_fpga, r.a_ch));
        for (const PortRef &p : {cab.a, cab.b})
            if (c.cable_at[p.rank][p.ch] >= 0)
                fail(source, r.where,
                     fmt::format("port {}:ch{} is already cabled", c.fpgas[p.rank], p.ch));
        int idx = static_cast<int>(c.cables.size());
        c.cable_at[cab.a.rank][cab.a.ch] = idx;
        c.cable_at[cab.b.rank][cab.b.ch] = idx;
        c.cables.push_back(cab);
    }
    return c;
}

Cabling parse_json(const std::string &text, const std::string &source) {
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception &e) {
        fail(source, "JSON", e.what());
    }
    if (!j.is_object())
        fail(source, "JSON", "top level is not an object");
    for (auto it = j.begin(); it != j.end(); ++it)
        if (it.key() != "fpgas" && it.key() != "connections")
            fail(source, it.key(), "unknown key (expected \"fpgas\" and \"connections\")");
    if (!j.contains("fpgas") || !j["fpgas"].is_object())
        fail(source, "fpgas", "missing or not an object {\"node:fpga\": \"program\"}");
    if (j.contains("connections") && !j["connections"].is_object())
        fail(source, "connections", "not an object {\"port\": \"port\"}");
    std::set<std::string> fpgas;
    std::map<std::string, std::string> programs;
    for (auto it = j["fpgas"].begin(); it != j["fpgas"].end(); ++it) {
        std::string where = fmt::format("fpgas[\"{}\"]", it.key());
        if (!valid_fpga(it.key()))
            fail(source, where, "FPGA name is not node:fpga");
        if (!it.value().is_string())
            fail(source, where, "program name is not a string");
        fpgas.insert(it.key());
        programs[it.key()] = it.value().get<std::string>();
    }
    std::vector<RawCable> raw;
    if (j.contains("connections"))
        for (auto it = j["connections"].begin(); it != j["connections"].end(); ++it) {
            RawCable r;
            r.where = fmt::format("connections[\"{}\"]", it.key());
            if (!it.value().is_string())
                fail(source, r.where, "value is not a port string");
            parse_port(it.key(), r.a_fpga, r.a_ch, source, r.where);
            parse_port(it.value().get<std::string>(), r.b_fpga, r.b_ch, source, r.where);
            raw.push_back(r);
        }
    return assemble(fpgas, programs, raw, source, true);
}

Cabling parse_text(const std::string &text, const std::string &source) {
    std::istringstream in(text);
    std::string line;
    std::vector<RawCable> raw;
    for (int n = 1; std::getline(in, line); n++) {
        std::string t = trim(line.substr(0, line.find('#')));
        if (t.empty())
            continue;
        RawCable r;
        r.where = fmt::format("line {}", n);
        size_t sep = t.find(" - ");
        if (sep == std::string::npos)
            fail(source, r.where, fmt::format("'{}' is not 'node:fpga:chN - node:fpga:chN'", t));
        parse_port(trim(t.substr(0, sep)), r.a_fpga, r.a_ch, source, r.where);
        parse_port(trim(t.substr(sep + 3)), r.b_fpga, r.b_ch, source, r.where);
        raw.push_back(r);
    }
    return assemble({}, {}, raw, source, false);
}

} // namespace

int Cabling::rank_of(const std::string &fpga) const {
    auto it = std::lower_bound(fpgas.begin(), fpgas.end(), fpga);
    return it != fpgas.end() && *it == fpga ? static_cast<int>(it - fpgas.begin()) : -1;
}

PortRef Cabling::peer(int rank, int ch) const {
    int idx = cable_at.at(rank).at(ch);
    if (idx < 0)
        return {};
    const Cable &c = cables[idx];
    return c.a.rank == rank && c.a.ch == ch ? c.b : c.a;
}

Cabling parse_cabling(const std::string &text, const std::string &source) {
    size_t first = text.find_first_not_of(" \t\r\n");
    if (first != std::string::npos && text[first] == '{')
        return parse_json(text, source);
    return parse_text(text, source);
}

Cabling load_cabling(const std::string &path) {
    std::ifstream in(path);
    if (!in)
        throw TopologyError(
            fmt::format("cannot read SMI cabling file {}: {}", path, std::strerror(errno)));
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse_cabling(ss.str(), path);
}

bool is_cabling_file(const std::string &path, const std::string &text) {
    if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".json") == 0)
        return true;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        std::string t = trim(line.substr(0, line.find('#')));
        if (t.empty())
            continue;
        return t.find(':') != std::string::npos && t.find(" - ") != std::string::npos;
    }
    return false;
}

std::string host_name(const std::string &fpga) {
    // Node names are short (topo: 1-12 of [a-z0-9_-]): "fpga-0001:acl0"
    // becomes "f0001-acl0".
    std::string f = fpga.rfind("fpga-", 0) == 0 ? "f" + fpga.substr(5) : fpga;
    std::string h;
    for (unsigned char ch : f)
        h += std::isalnum(ch) || ch == '_' || ch == '-' ? static_cast<char>(std::tolower(ch)) : '-';
    return h;
}

std::string topology_name(const std::string &path) {
    size_t slash = path.find_last_of('/');
    std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    size_t dot = base.find('.');
    return dot == std::string::npos || dot == 0 ? base : base.substr(0, dot);
}

std::string iface_name(int ch) {
    return fmt::format("ch{}", ch);
}

LinkEnd link_end(const Cabling &c, int rank, int ch) {
    int idx = c.cable_at.at(rank).at(ch);
    if (idx < 0)
        throw TopologyError(
            fmt::format("{}: {}:ch{} has no cable", c.source, c.fpgas.at(rank), ch));
    const Cable &cab = c.cables[idx];
    bool is_a = cab.a.rank == rank && cab.a.ch == ch;
    auto addr = [idx](int host) {
        return fmt::format("10.96.{}.{}", idx / 64, 4 * (idx % 64) + host);
    };
    return {iface_name(ch), addr(is_a ? 1 : 2), addr(is_a ? 2 : 1), 30};
}

Topology to_topology(const Cabling &c, const std::string &name) {
    MeshSpec spec;
    spec.name = name;
    spec.link_subnet = "10.96.0.0/16";
    for (const std::string &f : c.fpgas)
        spec.hosts.push_back(host_name(f));
    for (size_t i = 0; i < c.cables.size(); i++) {
        const Cable &cab = c.cables[i];
        LinkEnd ea = link_end(c, cab.a.rank, cab.a.ch);
        LinkEnd eb = link_end(c, cab.b.rank, cab.b.ch);
        MeshLinkSpec l;
        l.a = spec.hosts[cab.a.rank];
        l.b = spec.hosts[cab.b.rank];
        l.subnet = fmt::format("10.96.{}.{}/30", i / 64, 4 * (i % 64));
        l.a_ip = ea.ip;
        l.b_ip = eb.ip;
        l.a_iface = ea.iface;
        l.b_iface = eb.iface;
        l.a_mac = fmt::format("02:53:4d:{:02x}:{:02x}:00", cab.a.rank, cab.a.ch);
        l.b_mac = fmt::format("02:53:4d:{:02x}:{:02x}:00", cab.b.rank, cab.b.ch);
        spec.links.push_back(l);
    }
    return build_mesh(spec);
}

} // namespace incxdp::topo::smi
