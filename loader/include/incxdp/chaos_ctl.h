// SPDX-License-Identifier: BSD-2-Clause
// The loss injector's control plane: what `incxdp chaos` does, callable from
// tests. One tc (clsact) program instance per interface and hook, its maps
// pinned under <pin root>/<netns inode>-<ifname>/<hook>/ (bpf/include/incxdp/
// chaos.h), so a later process finds it again. Rates change with a map
// update while traffic flows. Every function throws ctl::CtlError naming
// the interface and the reason. See docs/CHAOS.md.
//
// (Named chaos_ctl.h because incxdp/chaos.h is the BPF map contract.)
#pragma once

#include <incxdp/chaos.h>
#include <incxdp/ctl.h>
#include <incxdp/topology.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace incxdp::ctl::chaos {

// Where frames are faulted. Egress sees what the stack sends out of the
// interface; ingress what arrives after its XDP program passed it. Neither
// sees frames an XDP program forwards (XDP_TX, XDP_REDIRECT) or AF_XDP
// sends. Xdp is the hook inside incxdp's own XDP programs (the engine,
// incxdp_pass, incxdp_xsk): everything the interface receives, whoever sent
// it, without a program of its own (bpf/lib/chaos_xdp.h).
enum class Hook { Egress, Ingress, Xdp };
const char *hook_name(Hook h);

// Probabilities in parts per million (INCXDP_CHAOS_PPM = 100%).
struct Rates {
    uint32_t loss_ppm = 0;
    uint32_t dup_ppm = 0;
    uint32_t corrupt_ppm = 0;
    uint32_t reorder_ppm = 0; // Xdp only
};

// A change of rates: fields left empty keep their current value (0 on a
// fresh attachment).
struct RateUpdate {
    std::optional<uint32_t> loss_ppm, dup_ppm, corrupt_ppm, reorder_ppm;
    bool empty() const { return !loss_ppm && !dup_ppm && !corrupt_ppm && !reorder_ppm; }
};

// Parses "5%", "0.5%", "0.05" (a fraction) or "0" into ppm. Throws CtlError
// ("--loss '120%': above 100%", "... not a number") with `what` as the name.
uint32_t parse_rate(const std::string &text, const std::string &what);
// 50000 -> "5%", 1500 -> "0.15%".
std::string format_rate(uint32_t ppm);

// Per-CPU counters, summed: one field per entry of INCXDP_CHAOS_STATS
// (incxdp/chaos.h); reordered and reflected only count on the xdp hook.
struct Counters {
#define INCXDP_CHAOS_FIELD_(NAME, name, what) uint64_t name = 0;
    INCXDP_CHAOS_STATS(INCXDP_CHAOS_FIELD_)
#undef INCXDP_CHAOS_FIELD_
};

struct HookStatus {
    std::string netns; // namespace name when known (topology calls), else ""
    uint64_t netns_inode = 0;
    std::string iface;
    Hook hook = Hook::Egress;
    bool attached = false; // tc: our filter is on the interface; xdp: rates are set
    uint32_t prog_id = 0;
    bool enabled = false;
    Rates rates;
    Counters counters;
    // xdp: how a duplicated or delayed frame goes round (incxdp/chaos.h):
    // "peer", "stack-out" or "stack-in"; "" for the tc hooks.
    std::string detour;
};

// The form `incxdp chaos -j` prints: rates as ppm and as text, counters.
nlohmann::json to_json(const HookStatus &s);
HookStatus hook_status_from_json(const nlohmann::json &j);

// The pin root: INCXDP_CHAOS_PIN_DIR, or the environment variable of that
// name (tests use private roots).
std::string default_pin_root();

// Attaches to `iface`'s hook in the calling thread's network namespace if
// not yet attached, then applies the update. Returns the new state. Xdp
// attaches nothing: it needs an incxdp XDP program on the interface and
// writes the rates into its maps (no pins; status finds them through the
// program). Reordering exists only there.
HookStatus set(const std::string &iface, Hook hook, const RateUpdate &update,
               const std::string &pin_root = default_pin_root());
// Detaches and removes the pins. Throws "not attached" if there is nothing.
void off(const std::string &iface, Hook hook, const std::string &pin_root = default_pin_root());
// Zeroes the counters.
void reset_counters(const std::string &iface, Hook hook,
                    const std::string &pin_root = default_pin_root());
// Every attachment of this namespace (iface empty), or of one interface.
std::vector<HookStatus> status(const std::string &iface = "",
                               const std::string &pin_root = default_pin_root());
// One hook's state, attached or not (attached = false, zero rates).
HookStatus hook_status(const std::string &iface, Hook hook,
                       const std::string &pin_root = default_pin_root());
// Removes the pins of attachments whose namespace no longer exists (its
// interfaces, tc filters and programs went with it; the pins stay behind).
// Returns the directories removed.
std::vector<std::string> prune(const std::string &pin_root = default_pin_root());

// ---- topologies -----------------------------------------------------------

// One place where a direction of a link is faulted.
struct LinkHook {
    std::string node, netns, iface;
    Hook hook = Hook::Egress;
    std::string peer; // node at the other end
};

// Where `--all-links` injects: every direction of every link exactly once.
// tc: host->switch at the host's egress; switch->host at the host's
// ingress, because the engine forwards with XDP and its frames never pass
// the switch's tc egress. Switch-switch links are returned in
// `unreachable`. xdp: each direction at its receiving end, every link
// (switch-switch too; AF_XDP hosts too).
struct LinkPlan {
    std::vector<LinkHook> hooks;
    std::vector<std::string> unreachable; // "sw1-sw2"
};
LinkPlan all_links(const topo::Topology &t, const std::string &prefix, bool xdp = false);

// set/off/status on every hook of the plan, each inside its namespace (a
// forked child that setns()es into /var/run/netns/<netns>). off() skips
// hooks that are not attached.
std::vector<HookStatus> set_links(const LinkPlan &plan, const RateUpdate &update,
                                  const std::string &pin_root = default_pin_root());
void off_links(const LinkPlan &plan, const std::string &pin_root = default_pin_root());
std::vector<HookStatus> status_links(const LinkPlan &plan,
                                     const std::string &pin_root = default_pin_root());

} // namespace incxdp::ctl::chaos
