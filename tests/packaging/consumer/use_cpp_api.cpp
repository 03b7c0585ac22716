// SPDX-License-Identifier: BSD-2-Clause
// Built against an installed incxdp, outside the source tree: a CommConfig
// validated by the library, no root and no switch needed.
#include <incxdp/communicator.h>
#include <incxdp/incxdp.h>

#include <cstdio>
#include <stdexcept>

int main() {
    incxdp::CommConfig cfg;
    cfg.world_size = 4;
    cfg.rank = 7; // not in the job
    cfg.switch_ip = "10.0.0.254";
    cfg.local_ip = "10.0.0.1";
    try {
        cfg.validate();
        std::fprintf(stderr, "validate() accepted rank 7 of 4\n");
        return 1;
    } catch (const std::invalid_argument &e) {
        std::printf("incxdp %s C++ API: %s; transport %s\n", incxdp_version(), e.what(),
                    cfg.transport_name().c_str());
    }
    return 0;
}
