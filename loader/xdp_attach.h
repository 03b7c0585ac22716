// SPDX-License-Identifier: BSD-2-Clause
// Attaching and finding incxdp's XDP programs on interfaces with libxdp,
// shared by the switch (switch_ctl.cpp) and the mesh relay (relay_ctl.cpp):
// the program alone or one component of libxdp's dispatcher, whichever
// the kernel allowed.
#pragma once

#include <xdp/libxdp.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace incxdp::ctl {

struct XdpProgDeleter {
    void operator()(xdp_program *p) const { xdp_program__close(p); }
};
using XdpProgPtr = std::unique_ptr<xdp_program, XdpProgDeleter>;

struct MultiprogDeleter {
    void operator()(xdp_multiprog *m) const { xdp_multiprog__close(m); }
};
using MultiprogPtr = std::unique_ptr<xdp_multiprog, MultiprogDeleter>;

// Runs the registered undo steps in reverse unless dismissed: a failed
// load leaves nothing half-installed.
class Rollback {
  public:
    ~Rollback() {
        if (armed_)
            for (auto it = undo_.rbegin(); it != undo_.rend(); ++it)
                (*it)();
    }
    void add(std::function<void()> f) { undo_.push_back(std::move(f)); }
    void dismiss() { armed_ = false; }

  private:
    std::vector<std::function<void()>> undo_;
    bool armed_ = true;
};

// What runs on the interface, or null (none, or the interface is gone).
MultiprogPtr multiprog_of(uint32_t ifindex);

using ProgMatch = std::function<bool(const xdp_program *)>;

// The program `match` accepts, attached alone (legacy) or as a component
// of libxdp's dispatcher; null if none.
const xdp_program *find_prog(const xdp_multiprog *mp, const ProgMatch &match);
// ... the program called `name` (as the kernel keeps it).
ProgMatch prog_named(const char *name);

// "native", "skb", "dispatcher/native", ...
std::string mode_name(const xdp_multiprog *mp);

// Attaches `prog` to the interface in `mode`. libxdp first probes for its
// multi-program dispatcher; where the kernel refuses it (freplace not
// permitted) it falls back to attaching the program alone, and the probe's
// warnings are expected, so they are demoted. Returns 0 or a negative errno.
int attach_prog(xdp_program *prog, uint32_t ifindex, xdp_attach_mode mode);

// Detaches the program `match` accepts from the interface, if it runs
// there; throws CtlError "cannot detach <what> from IF" on failure.
void detach_prog(uint32_t ifindex, const ProgMatch &match, const std::string &what);

} // namespace incxdp::ctl
