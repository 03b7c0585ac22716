// SPDX-License-Identifier: BSD-2-Clause
// What one send_frames() call of the AF_XDP transport to several peers
// costs through each of its senders (tx ring, live frames), for 1 and for
// batches of 8 to 64 frames, as SMI ranks send: out of a veth whose far end runs
// incxdp_xsk redirecting the frames into an AF_XDP socket. Runs in a
// private network namespace of its own (root). One JSON line per way and
// batch on stdout. docs/PERF.md "Tx ring or live frames".
#include "incxdp_xsk.skel.h"

#include <incxdp/transport.h>
#include <incxdp/util/iface.h>

#include "../tests/common/frames.h"
#include "../tests/common/private_netns.h"

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using incxdp::test::Bytes;
using incxdp::test::Endpoint;
using Clock = std::chrono::steady_clock;

constexpr uint16_t kPort = 4791;
constexpr uint32_t kIpA = 0x0a640001, kIpB = 0x0a640002; // 10.100.0.1, .2

std::array<uint8_t, 6> mac_of(const char *dev) {
    return incxdp::util::iface_mac(dev).value_or(incxdp::util::Mac{});
}

// incxdp_xsk attached in driver mode on `dev`: it sends the live frames of a
// transport there and steers UDP to ip:kPort into the socket of queue 0.
struct XskProg {
    XskProg(const char *dev, uint32_t ip) : ifindex(if_nametoindex(dev)) {
        skel = incxdp_xsk__open();
        if (!skel)
            throw std::runtime_error(std::string("open incxdp_xsk: ") + std::strerror(errno));
        skel->rodata->xsk_local_ip = htonl(ip);
        skel->rodata->xsk_local_port = htons(kPort);
        skel->rodata->xsk_tx_ifindex = ifindex;
        if (incxdp_xsk__load(skel) != 0)
            throw std::runtime_error(std::string("load incxdp_xsk: ") + std::strerror(errno));
        if (bpf_xdp_attach(int(ifindex), bpf_program__fd(skel->progs.incxdp_xsk),
                           XDP_FLAGS_DRV_MODE, nullptr) != 0)
            throw std::runtime_error(std::string("attach incxdp_xsk to ") + dev);
    }
    ~XskProg() {
        bpf_xdp_detach(int(ifindex), XDP_FLAGS_DRV_MODE, nullptr);
        incxdp_xsk__destroy(skel);
    }
    std::unique_ptr<incxdp::Transport> transport(const char *dev) const {
        incxdp::AfXdpPeersConfig c;
        c.ifnames = {dev};
        c.xskmap_fd = bpf_map__fd(skel->maps.incxdp_xsks);
        c.describe = dev;
        return incxdp::make_afxdp_peers_transport(c);
    }
    unsigned ifindex;
    incxdp_xsk *skel = nullptr;
};

// Everything the receiver holds, handed back.
size_t drain(incxdp::Transport &rx) {
    std::vector<std::span<const std::byte>> views(64);
    size_t total = 0;
    for (size_t n; (n = rx.recv_views(views, 4096)) > 0;)
        total += n;
    return total;
}

struct Result {
    double p50_us, mean_us;
    size_t calls, frames, received;
};

// `iters` calls of `batch` frames each (a call that takes fewer is retried
// until the batch is out; the call's time is all of it).
Result measure(incxdp::Transport &tx, incxdp::Transport &rx, const std::vector<Bytes> &frames,
               uint32_t ifindex, size_t batch, size_t iters) {
    std::vector<incxdp::FrameOut> out;
    for (size_t i = 0; i < batch; i++) {
        const Bytes &f = frames[i % frames.size()];
        out.push_back({std::as_bytes(std::span(f)), ifindex});
    }
    std::vector<double> us;
    size_t received = 0;
    for (size_t it = 0; it < iters + iters / 10; it++) {
        const auto t0 = Clock::now();
        for (size_t sent = 0; sent < batch;)
            sent += tx.send_frames(std::span(out).subspan(sent));
        const auto t1 = Clock::now();
        if (it >= iters / 10) // the first tenth warms up
            us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        received += drain(rx);
    }
    usleep(10000);
    received += drain(rx);
    std::sort(us.begin(), us.end());
    double sum = 0;
    for (double u : us)
        sum += u;
    return {us[us.size() / 2], sum / double(us.size()), us.size(), (iters + iters / 10) * batch,
            received};
}

} // namespace

int main(int argc, char **argv) {
    const size_t iters = argc > 1 ? size_t(std::atol(argv[1])) : 2000;
    const size_t payload = argc > 2 ? size_t(std::atol(argv[2])) : 64;
    if (geteuid() != 0) {
        std::fprintf(stderr, "xsk-tx-cost: needs root (namespaces, XDP)\n");
        return 2;
    }
    try {
        if (std::string e = incxdp::test::enter_private_netns(); !e.empty())
            throw std::runtime_error(e);
        if (std::string e = incxdp::test::add_veth_pair("xtA", "xtB"); !e.empty())
            throw std::runtime_error(e);
        XskProg a("xtA", kIpA), b("xtB", kIpB);
        auto rx = b.transport("xtB");
        std::vector<Bytes> frames;
        for (uint32_t i = 0; i < 64; i++) {
            Bytes pl;
            incxdp::test::put32(pl, i);
            pl.resize(payload, 0xab);
            frames.push_back(incxdp::test::udp_frame(Endpoint{mac_of("xtA"), kIpA, kPort},
                                                     Endpoint{mac_of("xtB"), kIpB, kPort}, pl));
        }
        for (const char *way : {"ring", "live"}) {
            setenv("INCXDP_XSK_TX", way, 1);
            auto tx = a.transport("xtA");
            for (size_t batch : {1, 8, 16, 32, 64}) {
                const Result r = measure(*tx, *rx, frames, a.ifindex, batch, iters);
                std::printf("{\"way\":\"%s\",\"frames_per_call\":%zu,\"frame_bytes\":%zu,"
                            "\"calls\":%zu,\"p50_us\":%.2f,\"mean_us\":%.2f,"
                            "\"mean_us_per_frame\":%.3f,\"sent\":%zu,\"received\":%zu}\n",
                            way, batch, frames[0].size(), r.calls, r.p50_us, r.mean_us,
                            r.mean_us / double(batch), r.frames, r.received);
                std::fflush(stdout);
            }
        }
    } catch (const std::exception &e) {
        std::fprintf(stderr, "xsk-tx-cost: %s\n", e.what());
        return 1;
    }
    return 0;
}
