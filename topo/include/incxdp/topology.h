// SPDX-License-Identifier: BSD-2-Clause
// A network-namespace topology described as YAML (see docs/TOPOLOGY.md).
// Everything a process needs (interface names, MACs, addresses, job
// membership) is derived deterministically from the file, so the CLI, the
// workers and the tests agree without exchanging state.
#pragma once

#include <incxdp/util/mac.h>

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace incxdp::topo {

using Mac = util::Mac;

std::string mac_to_string(const Mac &mac);
Mac mac_from_string(const std::string &s); // throws TopologyError

struct TopologyError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class NodeKind { Host, Switch };

struct Iface {
    std::string name;      // interface name inside the node's namespace
    Mac mac{};             // deterministic: 02:49:58:<node idx>:<iface idx>:00
    std::string peer_node; // node at the other end of the veth
    std::string peer_iface;
    // IPv4 address `topo up` puts on this interface, empty if none: a
    // switched topology's host has Node::ip on its first interface; a mesh
    // host one address per link, on that link's subnet.
    std::string ip;
    int prefix_len = 0; // of ip; 0 when ip is empty
};

struct Node {
    std::string name;
    NodeKind kind = NodeKind::Host;
    std::string ip;            // host: its address; switch: service address
    std::vector<Iface> ifaces; // in link order
};

struct Link {
    std::string a, b;             // node names
    std::string a_iface, b_iface; // the link's interface at each end
    std::string subnet;           // mesh: the link's own CIDR; empty otherwise
};
// A switched topology's link may also be a mapping {a: s1, b: s0, a_iface:
// IF, b_iface: IF, a_mac: MAC, b_mac: MAC}: the ends' interface names and
// MACs as on real machines, instead of the derived ones (docs/TOPOLOGY.md).

// switched: hosts on one subnet behind switch namespaces (the default).
// mesh: hosts cabled directly to each other, each link its own subnet, no
// switch (docs/TOPOLOGY.md "Mesh topologies").
enum class TopologyKind { Switched, Mesh };

const char *topology_kind_name(TopologyKind k); // "switched", "mesh"

// The pool a mesh's links take their /24s from unless given their own subnet.
inline constexpr const char *kDefaultLinkSubnet = "10.90.0.0/16";

// How `topo up` routes host-to-host traffic (fattree_routes.h).
enum class Routing { None, UpDown };

// star: UDP (native/SwitchML), every worker linked to the one switch.
// roce-tree: RoCEv2 RC connections along a tree of switches rooted at
// `switch_name` (docs/ROCE.md, tree.h).
// tree: native UDP over several switches rooted at `switch_name`, each
// worker below the tree switch nearest the root it is linked to
// (fattree_plan.h build_agg_tree; docs/APPLY.md).
enum class JobKind { Star, RoceTree, Tree };

const char *job_kind_name(JobKind k); // "star", "roce-tree", "tree"

/// roce-tree: how the switch a host is attached to takes that host's SENDs
/// (docs/ROCE.md §3). Strict is what an RC requester (a NIC, Soft-RoCE,
/// INC_Emulation's hosts) needs: in PSN order, a NAK on a gap, go-back-N.
/// Any takes them in any order within the window, as from a switch child,
/// and never NAKs: a lost frame costs one resend of that frame, not of the
/// window behind it. Only for hosts that recover by results, not ACKs
/// (hostlib's `roce` transport).
enum class HostOrder { Strict, Any };
const char *host_order_name(HostOrder o); // "strict", "any"

struct Job {
    uint32_t id = 0;
    JobKind kind = JobKind::Star;
    std::string switch_name;          // star: the switch; roce-tree, tree: the root switch
    std::vector<std::string> workers; // host names, index = rank
    uint16_t worker_port = 4000;      // star: UDP source port of every worker
    uint32_t slots = 256;             // slot pool size on each switch of the job
    // roce-tree: the PSN every connection's bases derive from (tree.h);
    // none = a default derived from the job id.
    std::optional<uint32_t> start_psn;
    HostOrder host_order = HostOrder::Strict; // roce-tree only
};

struct Topology {
    std::string name;
    TopologyKind kind = TopologyKind::Switched;
    std::string subnet;      // e.g. 10.77.0.0/24; hosts get ip/prefix on eth0 (mesh: empty)
    int prefix_len = 24;     // of subnet (mesh: 0, see Iface::prefix_len)
    std::string link_subnet; // mesh: the pool of derived link subnets; empty otherwise
    int mtu = 3500;
    std::vector<Node> nodes; // switches first, then hosts, file order
    std::vector<Link> links;
    std::vector<Job> jobs;
    // `routing: updown`: IP routes through the switch namespaces (fat-trees,
    // docs/FATTREE.md); none: hosts reach only their switches' addresses.
    Routing routing = Routing::None;

    static Topology load_file(const std::string &path); // throws TopologyError
    static Topology parse(const std::string &yaml);     // throws TopologyError

    const Node &node(const std::string &name) const; // throws TopologyError
    const Job &job(uint32_t id) const;               // throws TopologyError
    // The switch-side interface of the link between host and switch.
    const Iface &switch_port_for(const std::string &sw, const std::string &host) const;
    // The host's interface towards the given switch.
    const Iface &host_iface_for(const std::string &host, const std::string &sw) const;
};

/// One cable of a mesh, as a file gives it or code builds it (SMI's cabling
/// files). Empty fields are derived: subnet = /24 number i of link_subnet
/// (i = the link's position), a_ip/b_ip = its first/second usable address,
/// interface names `m-<peer>` (`m-<peer>-<j>` for the j-th further link
/// between the same pair), MACs 02:49:58:<node idx>:<iface idx>:00.
struct MeshLinkSpec {
    std::string a, b;             // host names
    std::string subnet;           // CIDR, prefix length 1..31
    std::string a_ip, b_ip;       // usable addresses of subnet, distinct
    std::string a_iface, b_iface; // 1-15 chars of [A-Za-z0-9_.-], unique per node
    std::string a_mac, b_mac;     // unicast, unique in the topology
};

/// A mesh topology in code. Host i is node index i (its MACs' 4th byte).
struct MeshSpec {
    std::string name;
    std::string link_subnet = kDefaultLinkSubnet; // prefix length 1..24
    int mtu = 3500;
    std::vector<std::string> hosts;
    std::vector<MeshLinkSpec> links;
};

/// A kind-mesh Topology from a spec, with every check `kind: mesh` files
/// get; throws TopologyError "mesh NAME: links[2]: <what, with the value>".
Topology build_mesh(const MeshSpec &spec);

// Namespace name of a node when the topology is brought up with `prefix`.
std::string netns_name(const std::string &prefix, const std::string &node);

} // namespace incxdp::topo
