// SPDX-License-Identifier: BSD-2-Clause
// The mesh relay's control plane (bpf/incxdp_relay.bpf.c, docs/MESH.md):
// attaching a node's relay to its interfaces, and the forwarding table,
// knobs and counters in its pinned maps. Layouts in incxdp/relay.h. Every
// function throws ctl::CtlError naming the object and the reason, and works
// on the interfaces of the calling thread's network namespace: run it in
// the node's (nsenter --net=...).
#pragma once

#include <incxdp/ctl.h>
#include <incxdp/relay.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace incxdp::relay {

struct RelayConfig {
    uint32_t self_node = 0;
    bool relay_enabled = true;
    uint32_t max_hops = INCXDP_RELAY_DEFAULT_MAX_HOPS;
};

// $INCXDP_MESH_PIN_DIR, else /sys/fs/bpf/incxdp/mesh.
std::string default_pin_dir();

// Loads the relay and attaches it to every interface (all or nothing), in
// "native" (driver, xdp.frags) or "skb" (generic) mode, with libxdp (its
// dispatcher where the kernel allows it, else alone). The maps are pinned
// in pin_dir (reused if a relay of this node already pinned them there);
// every interface joins incxdp_relay_tx. The config starts as
// RelayConfig{} until set_config. Refuses an interface the relay already
// runs on.
void attach(const std::string &pin_dir, const std::vector<std::string> &ifaces,
            const std::string &mode);

// Detaches the relay whose maps are pinned in pin_dir from every interface
// of this namespace it runs on, then removes the pins and the directory.
// Nothing pinned there: nothing to do.
void detach(const std::string &pin_dir);

// Whether pin_dir holds a relay's pins.
bool present(const std::string &pin_dir);

// The maps of a running node's relay, from their pins (fds closed on
// destruction). Node ids are host order, as in the maps' keys.
class RelayMaps {
  public:
    // Throws if the relay is not pinned there ("run `incxdp mesh run` first").
    static RelayMaps open(const std::string &pin_dir);

    const std::string &pin_dir() const { return dir_; }

    void set_config(const RelayConfig &c);
    RelayConfig config() const;

    // Checks the route (1..INCXDP_RELAY_MAX_NEXTHOPS next hops, each
    // interface in incxdp_relay_tx) before writing it.
    void set_route(uint32_t dst_node, const incxdp_relay_route &r);
    // Removing an absent route is no error.
    void del_route(uint32_t dst_node);
    std::map<uint32_t, incxdp_relay_route> routes() const;

    // An interface next hops may leave by (attach() adds every attached one).
    void add_tx_port(uint32_t ifindex);
    std::vector<uint32_t> tx_ports() const;

    // Per-CPU counters summed, index = enum incxdp_relay_stat.
    std::array<uint64_t, INCXDP_RELAY_STAT_MAX> stats() const;
    void reset_stats();

    // incxdp_relay_xsks, for the local endpoint's AF_XDP sockets (key: rx
    // queue, value: socket fd). Owned by this object.
    int xsks_fd() const;

    RelayMaps(RelayMaps &&) noexcept;
    RelayMaps &operator=(RelayMaps &&) noexcept;
    ~RelayMaps();

  private:
    struct Fds; // the pinned maps' fds (ctl::Fd)
    RelayMaps();
    std::unique_ptr<Fds> fds_;
    std::string dir_;
};

// The counters' names, for the CLI and JSON: "pass", "deliver_xsk", ...
const char *stat_name(incxdp_relay_stat s);
// Every name, in the enum's order.
const std::array<const char *, INCXDP_RELAY_STAT_MAX> &stat_names();

} // namespace incxdp::relay
