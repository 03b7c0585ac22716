// SPDX-License-Identifier: BSD-2-Clause
// The star topology (topo/topologies/star.yaml): workers w0..w3, job 1.
#pragma once

#include "netns_fixture.h"

namespace incxdp::test {

inline std::string star_file() { return topology_file("star"); }

class StarTopology : public NetnsTopology {
  protected:
    static void SetUpTestSuite() { bring_up(star_file(), "ixe"); }
    static void TearDownTestSuite() { tear_down(); }

    // Runs one command per rank concurrently, each in its worker's namespace.
    static std::vector<proc::ProcResult> on_all_workers(const std::function<std::vector<std::string>(int)> &argv_of,
                                                        int nworkers = 4)
    {
        std::vector<std::string> nodes;
        for (int r = 0; r < nworkers; r++)
            nodes.push_back("w" + std::to_string(r));
        return on_nodes(nodes, argv_of);
    }
};

} // namespace incxdp::test
