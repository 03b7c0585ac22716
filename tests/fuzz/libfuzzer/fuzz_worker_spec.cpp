// SPDX-License-Identifier: BSD-2-Clause
// Explicit job rules: `incxdp job add --worker RANK=MAC/IP:PORT@IFACE ...`
// (ctl::parse_worker_spec), then the job checks of ctl::job_add, which run
// before the pinned maps are opened (a pin directory that does not exist
// stops job_add right after them, so no BPF state is touched).
//
// Input: text lines. "id=N", "slots=N", "max=N", "sw=IP" set the job's
// fields; every other line is a worker spec.
// Contract: parse_worker_spec and job_add throw CtlError and nothing else.
#include "check.h"

#include <incxdp/ctl.h>

#include <arpa/inet.h>

#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

using namespace incxdp;

namespace {

uint32_t number(const std::string &s) {
    return uint32_t(std::strtoul(s.c_str(), nullptr, 0));
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    std::istringstream in(std::string(reinterpret_cast<const char *>(data), size));
    ctl::JobSpec job;
    job.switch_ip = htonl(0x0a4d00fe);
    std::string line;
    for (int lines = 0; lines < 64 && std::getline(in, line); lines++) {
        if (line.rfind("id=", 0) == 0) {
            job.id = number(line.substr(3));
        } else if (line.rfind("slots=", 0) == 0) {
            job.slots = number(line.substr(6));
        } else if (line.rfind("max=", 0) == 0) {
            job.max_elems = number(line.substr(4));
        } else if (line.rfind("sw=", 0) == 0) {
            in_addr a{};
            job.switch_ip = inet_pton(AF_INET, line.substr(3).c_str(), &a) == 1 ? a.s_addr : 0;
        } else {
            try {
                ctl::WorkerSpec w = ctl::parse_worker_spec(line);
                FUZZ_CHECK(w.rank < INCXDP_MAX_WORKERS);
                FUZZ_CHECK(w.port != 0);
                FUZZ_CHECK(!w.iface.empty() && w.iface.find_first_of(" \t@") == std::string::npos);
                FUZZ_CHECK(topo::mac_from_string(topo::mac_to_string(w.mac)) == w.mac);
                job.workers.push_back(w);
            } catch (const ctl::CtlError &) {
            }
        }
    }
    try {
        ctl::job_add(job, "/nonexistent/incxdp-fuzz");
        FUZZ_CHECK(!"job_add succeeded without pinned maps");
    } catch (const ctl::CtlError &) {
    }
    return 0;
}
