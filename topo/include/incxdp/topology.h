// SPDX-License-Identifier: BSD-2-Clause
// A network-namespace topology described as YAML (see docs/TOPOLOGY.md).
// Everything a process needs (interface names, MACs, addresses, job
// membership) is derived deterministically from the file, so the CLI, the
// workers and the tests agree without exchanging state.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace incxdp::topo {

using Mac = std::array<uint8_t, 6>;

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
};

struct Node {
    std::string name;
    NodeKind kind = NodeKind::Host;
    std::string ip;            // host: its address; switch: service address
    std::vector<Iface> ifaces; // in link order
};

struct Link {
    std::string a, b; // node names
};

// star: UDP (native/SwitchML), every worker linked to the one switch.
// roce-tree: RoCEv2 RC connections along a tree of switches rooted at
// `switch_name` (docs/ROCE.md, tree.h).
enum class JobKind { Star, RoceTree };

const char *job_kind_name(JobKind k); // "star", "roce-tree"

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
    std::string switch_name;          // star: the switch; roce-tree: the root switch
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
    std::string subnet; // e.g. 10.77.0.0/24; hosts get ip/prefix on eth0
    int prefix_len = 24;
    int mtu = 3500;
    std::vector<Node> nodes; // switches first, then hosts, file order
    std::vector<Link> links;
    std::vector<Job> jobs;

    static Topology load_file(const std::string &path); // throws TopologyError
    static Topology parse(const std::string &yaml);     // throws TopologyError

    const Node &node(const std::string &name) const; // throws TopologyError
    const Job &job(uint32_t id) const;               // throws TopologyError
    // The switch-side interface of the link between host and switch.
    const Iface &switch_port_for(const std::string &sw, const std::string &host) const;
    // The host's interface towards the given switch.
    const Iface &host_iface_for(const std::string &host, const std::string &sw) const;
};

// Namespace name of a node when the topology is brought up with `prefix`.
std::string netns_name(const std::string &prefix, const std::string &node);

} // namespace incxdp::topo
