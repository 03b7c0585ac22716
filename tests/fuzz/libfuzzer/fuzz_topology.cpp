// SPDX-License-Identifier: BSD-2-Clause
// Topology YAML (incxdp::topo::Topology::parse), and what the CLI derives
// from a topology that parsed: job rules (ctl::job_from_topology), port and
// interface lookups, MAC round trips.
// Contract: parse() either returns or throws TopologyError; a topology that
// parsed yields every job's rules without an error.
#include "check.h"

#include <incxdp/ctl.h>
#include <incxdp/topology.h>
#include <incxdp/tree.h>

#include <cstdint>
#include <set>
#include <string>

using namespace incxdp;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const std::string text(reinterpret_cast<const char *>(data), size);
    topo::Topology t;
    try {
        t = topo::Topology::parse(text);
    } catch (const topo::TopologyError &) {
        return 0; // refused with a message: fine
    }
    // Anything else escaping parse() is a bug, and libFuzzer reports it.

    FUZZ_CHECK(!t.nodes.empty());
    FUZZ_CHECK(t.mtu >= 68 && t.mtu <= 9000);
    std::set<topo::Mac> macs;
    for (const auto &n : t.nodes) {
        FUZZ_CHECK(&t.node(n.name) == &n);
        FUZZ_CHECK(!topo::netns_name("ix-", n.name).empty());
        for (const auto &i : n.ifaces) {
            FUZZ_CHECK(!i.name.empty() && i.name.size() <= 15);
            FUZZ_CHECK(macs.insert(i.mac).second); // every interface has its own MAC
            FUZZ_CHECK(topo::mac_from_string(topo::mac_to_string(i.mac)) == i.mac);
            const auto &peer = t.node(i.peer_node);
            bool back = false;
            for (const auto &pi : peer.ifaces)
                back |= pi.name == i.peer_iface && pi.peer_node == n.name;
            FUZZ_CHECK(back); // the veth's other end points back
        }
    }
    for (const auto &j : t.jobs) {
        FUZZ_CHECK(&t.job(j.id) == &j);
        if (j.kind == topo::JobKind::RoceTree) {
            // The parser accepted the tree, so planning it must not throw.
            topo::TreePlan plan = topo::plan_tree(t, j.id); // must not throw
            FUZZ_CHECK(plan.ranks.size() == j.workers.size());
            FUZZ_CHECK(plan.host_conn.size() == j.workers.size());
            std::set<uint32_t> qpns;
            for (const auto &c : plan.conns) {
                FUZZ_CHECK(c.child_qpn != 0 && c.parent_qpn != 0);
                FUZZ_CHECK(c.child_qpn < (1u << 24) && c.parent_qpn < (1u << 24));
                FUZZ_CHECK(qpns.insert(c.child_qpn).second && qpns.insert(c.parent_qpn).second);
            }
            continue;
        }
        ctl::JobSpec spec = ctl::job_from_topology(t, j.id); // must not throw
        FUZZ_CHECK(spec.id == j.id);
        FUZZ_CHECK(spec.workers.size() == j.workers.size());
        FUZZ_CHECK(spec.switch_ip != 0);
        FUZZ_CHECK(spec.slots == j.slots && spec.slots >= 1);
        std::set<std::string> ports;
        for (size_t r = 0; r < spec.workers.size(); r++) {
            const auto &w = spec.workers[r];
            FUZZ_CHECK(w.rank == r);
            FUZZ_CHECK(w.port == j.worker_port && w.port != 0);
            FUZZ_CHECK(ports.insert(w.iface).second); // one worker per switch port
            FUZZ_CHECK(t.switch_port_for(j.switch_name, j.workers[r]).name == w.iface);
            FUZZ_CHECK(t.host_iface_for(j.workers[r], j.switch_name).mac == w.mac);
        }
    }
    return 0;
}
