// SPDX-License-Identifier: BSD-2-Clause
// build_mesh(): a mesh Topology from a MeshSpec, every derivation and check
// of docs/TOPOLOGY.md "Mesh topologies" in one place.
#include "addr_detail.h"
#include "mesh_detail.h"

#include <incxdp/proto.h>

#include <map>
#include <set>

namespace incxdp::topo {

static_assert(MeshSpec{}.mtu == INCXDP_LINK_MTU, "a mesh's default MTU is every topology's");

namespace detail {
namespace {

using Part = MeshWhere::Part;

class MeshBuilder {
  public:
    MeshBuilder(const MeshSpec &spec, const MeshReport &report) : s_(spec), report_(report) {}

    Topology build() {
        t_.kind = TopologyKind::Mesh;
        t_.name = s_.name;
        if (!valid_name(t_.name, kMaxNetnsName))
            fail({Part::Top, 0, "name"},
                 fmt::format("bad topology name '{}': use 1-{} characters from [a-z0-9_-]", t_.name,
                             kMaxNetnsName));
        if (s_.mtu < kMinMtu || s_.mtu > kMaxMtu)
            fail({Part::Top, 0, "mtu"},
                 fmt::format("{} is out of range [{}, {}]", s_.mtu, kMinMtu, kMaxMtu));
        t_.mtu = s_.mtu;
        t_.prefix_len = 0;
        // Each derived link takes a whole /24.
        pool_ = cidr({Part::Top, 0, "link_subnet"}, s_.link_subnet, 24);
        t_.link_subnet = pool_.str();
        add_hosts();
        for (size_t i = 0; i < s_.links.size(); ++i)
            add_link(i);
        for (size_t i = 0; i < t_.nodes.size(); ++i)
            if (t_.nodes[i].ifaces.empty())
                fail({Part::Host, i, ""},
                     fmt::format("host '{}' has no link (a mesh host reaches others only over "
                                 "its own links)",
                                 t_.nodes[i].name));
        return std::move(t_);
    }

  private:
    [[noreturn]] void fail(const MeshWhere &w, const std::string &msg) const {
        report_(w, msg);
        throw TopologyError(mesh_where_string(s_, w) + ": " + msg);
    }

    Cidr cidr(const MeshWhere &w, const std::string &s, int max_prefix) const {
        std::string err;
        const auto c = parse_cidr(s, max_prefix, &err);
        if (!c)
            fail(w, err);
        return *c;
    }

    void add_hosts() {
        if (s_.hosts.empty())
            fail({Part::Top, 0, "hosts"}, "at least one entry is required");
        for (size_t i = 0; i < s_.hosts.size(); ++i) {
            const std::string &name = s_.hosts[i];
            if (!valid_name(name, kMaxNodeName))
                fail({Part::Host, i, "name"},
                     fmt::format("bad node name '{}': use 1-{} characters from [a-z0-9_-]", name,
                                 kMaxNodeName));
            if (index_.count(name))
                fail({Part::Host, i, "name"}, fmt::format("duplicate node name '{}'", name));
            if (i >= kMaxIndex)
                fail({Part::Host, i, ""}, fmt::format("more than {} nodes", kMaxIndex));
            index_[name] = i;
            Node n;
            n.name = name;
            n.kind = NodeKind::Host;
            t_.nodes.push_back(std::move(n));
        }
    }

    size_t node_of(size_t link, const char *key, const std::string &name) const {
        const auto it = index_.find(name);
        if (it == index_.end())
            fail({Part::Link, link, key}, fmt::format("unknown node '{}'", name));
        return it->second;
    }

    Cidr link_subnet(size_t i) const {
        const MeshLinkSpec &l = s_.links[i];
        if (!l.subnet.empty())
            return cidr({Part::Link, i, "subnet"}, l.subnet, 31);
        const uint64_t count = uint64_t{1} << (24 - pool_.prefix);
        if (i >= count)
            fail({Part::Link, i, ""},
                 fmt::format("no /24 left for this link: link_subnet {} has {}; give a larger "
                             "link_subnet or the link its own subnet",
                             pool_.str(), count));
        Cidr c;
        c.prefix = 24;
        c.mask = ~uint32_t{0} << 8;
        c.net = pool_.net + static_cast<uint32_t>(i << 8);
        return c;
    }

    uint32_t address(size_t i, const char *key, const std::string &given, const Cidr &c,
                     uint32_t derived) const {
        if (given.empty())
            return derived;
        const auto ip = parse_ipv4(given);
        if (!ip)
            fail({Part::Link, i, key}, fmt::format("bad IPv4 address '{}'", given));
        if (!c.contains(*ip))
            fail({Part::Link, i, key},
                 fmt::format("address {} is outside the link's subnet {}", given, c.str()));
        if (!c.usable(*ip))
            fail({Part::Link, i, key},
                 fmt::format("address {} is the network or broadcast address of subnet {}", given,
                             c.str()));
        return *ip;
    }

    std::string iface_name(size_t i, const char *key, const std::string &given,
                           const std::string &peer, size_t parallel) const {
        if (!given.empty()) {
            if (!valid_ifname(given))
                fail({Part::Link, i, key},
                     fmt::format("bad interface name '{}': use 1-{} characters from "
                                 "[A-Za-z0-9_.-]",
                                 given, kMaxIfName));
            return given;
        }
        const std::string suffix = parallel ? fmt::format("-{}", parallel) : "";
        return ("m-" + peer).substr(0, kMaxIfName - suffix.size()) + suffix;
    }

    Mac mac(size_t i, const char *key, const std::string &given, size_t node, size_t k) const {
        if (given.empty())
            return {0x02, 0x49, 0x58, static_cast<uint8_t>(node), static_cast<uint8_t>(k), 0x00};
        Mac m{};
        try {
            m = mac_from_string(given);
        } catch (const TopologyError &e) {
            fail({Part::Link, i, key}, e.what());
        }
        if (const std::string why = mac_problem(m); !why.empty())
            fail({Part::Link, i, key}, why);
        return m;
    }

    // The interface of link i at one end; checks its name and MAC against
    // every interface made so far.
    Iface make_end(size_t i, bool a, size_t self, size_t peer, const Cidr &c, uint32_t ip,
                   size_t parallel) {
        const MeshLinkSpec &l = s_.links[i];
        const std::string &given_if = a ? l.a_iface : l.b_iface;
        const std::string &given_mac = a ? l.a_mac : l.b_mac;
        // A derived value has no key of its own to point at: the link.
        const char *ifkey = given_if.empty() ? "" : a ? "a_iface" : "b_iface";
        const char *mackey = given_mac.empty() ? "" : a ? "a_mac" : "b_mac";
        const Node &n = t_.nodes[self];
        const size_t k = n.ifaces.size();
        if (k >= kMaxIndex)
            fail({Part::Link, i, ""},
                 fmt::format("node '{}' has more than {} links", n.name, kMaxIndex));
        Iface f;
        f.name = iface_name(i, ifkey, given_if, t_.nodes[peer].name, parallel);
        for (size_t j = 0; j < n.ifaces.size(); ++j)
            if (n.ifaces[j].name == f.name)
                fail({Part::Link, i, ifkey},
                     fmt::format("interface name '{}' on node '{}' is used twice (links[{}] "
                                 "and links[{}])",
                                 f.name, n.name, if_link_[self][j], i));
        f.mac = mac(i, mackey, given_mac, self, k);
        const auto owner = mac_owner_.find(f.mac);
        if (owner != mac_owner_.end())
            fail({Part::Link, i, mackey},
                 fmt::format("duplicate MAC {} (also on {})", mac_to_string(f.mac), owner->second));
        mac_owner_[f.mac] = n.name + ":" + f.name;
        f.peer_node = t_.nodes[peer].name;
        f.ip = format_ipv4(ip);
        f.prefix_len = c.prefix;
        return f;
    }

    void add_link(size_t i) {
        const MeshLinkSpec &l = s_.links[i];
        const size_t ia = node_of(i, "a", l.a), ib = node_of(i, "b", l.b);
        if (ia == ib)
            fail({Part::Link, i, ""}, fmt::format("node '{}' is linked to itself", l.a));
        const Cidr c = link_subnet(i);
        for (size_t j = 0; j < subnets_.size(); ++j)
            if (subnets_[j].overlaps(c))
                fail({Part::Link, i, l.subnet.empty() ? "" : "subnet"},
                     fmt::format("subnet {} overlaps links[{}]'s subnet {}", c.str(), j,
                                 subnets_[j].str()));
        const uint32_t ip_a = address(i, "a_ip", l.a_ip, c, c.first_usable());
        const uint32_t ip_b = address(i, "b_ip", l.b_ip, c, c.first_usable() + 1);
        if (ip_a == ip_b)
            fail({Part::Link, i, l.b_ip.empty() ? "a_ip" : "b_ip"},
                 fmt::format("duplicate address {}: a_ip and b_ip must differ", format_ipv4(ip_a)));
        // Parallel cables between one pair: the first is m-<peer>, the
        // next m-<peer>-1, ... at both ends.
        const size_t parallel = pairs_[std::minmax(ia, ib)]++;
        Iface fa = make_end(i, true, ia, ib, c, ip_a, parallel);
        if_link_[ia].push_back(i);
        t_.nodes[ia].ifaces.push_back(fa);
        Iface fb = make_end(i, false, ib, ia, c, ip_b, parallel);
        if_link_[ib].push_back(i);
        fb.peer_iface = fa.name;
        t_.nodes[ia].ifaces.back().peer_iface = fb.name;
        t_.nodes[ib].ifaces.push_back(fb);
        subnets_.push_back(c);
        t_.links.push_back(Link{l.a, l.b, fa.name, fb.name, c.str()});
    }

    const MeshSpec &s_;
    const MeshReport &report_;
    Topology t_;
    Cidr pool_;
    std::map<std::string, size_t> index_;
    std::map<size_t, std::vector<size_t>> if_link_; // node -> link of each iface
    std::map<std::pair<size_t, size_t>, size_t> pairs_;
    std::map<Mac, std::string> mac_owner_;
    std::vector<Cidr> subnets_;
};

} // namespace

std::string mesh_where_string(const MeshSpec &spec, const MeshWhere &w) {
    switch (w.part) {
    case MeshWhere::Part::Host:
        if (w.index < spec.hosts.size())
            return fmt::format("hosts[{}] ({})", w.index, spec.hosts[w.index]);
        return fmt::format("hosts[{}]", w.index);
    case MeshWhere::Part::Link:
        return fmt::format("links[{}]", w.index);
    case MeshWhere::Part::Top:
        break;
    }
    return w.key;
}

Topology build_mesh_checked(const MeshSpec &spec, const MeshReport &report) {
    return MeshBuilder(spec, report).build();
}

} // namespace detail

Topology build_mesh(const MeshSpec &spec) {
    return detail::build_mesh_checked(
        spec, [&](const detail::MeshWhere &w, const std::string &msg) {
            throw TopologyError(
                fmt::format("mesh {}: {}: {}", spec.name, detail::mesh_where_string(spec, w), msg));
        });
}

} // namespace incxdp::topo
