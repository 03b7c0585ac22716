// SPDX-License-Identifier: BSD-2-Clause
// fattree4.yaml brought up as 36 namespaces with up/down routing: ICMP and
// TCP between hosts under one ToR, one pod and two pods, interface counters
// showing which tier carried them, ECMP spreading flows over the cores, and
// the same with the incxdp engine loaded on the switch ports (it passes
// what it does not aggregate to the stack, which forwards it). Needs root.
#include "../common/interrupt_cleanup.h"
#include "process.h"

#include <incxdp/fattree_routes.h>
#include <incxdp/netns.h>
#include <incxdp/topology.h>
#include <incxdp/util/fd.h>
#include <incxdp/util/ipv4.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <netinet/ip.h>
#include <netinet/ip_icmp.h>
#include <optional>
#include <sched.h>
#include <sys/socket.h>
#include <thread>
#include <unistd.h>

using namespace incxdp::topo;
using incxdp::test::CleanupOnInterrupt;
using nlohmann::json;
namespace proc = incxdp::topo::detail;

namespace {

const std::string kFile = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/fattree4.yaml";

// A socket created inside /var/run/netns/<ns>: it stays in that namespace
// after the thread returns to its own.
int socket_in(const std::string &ns, int domain, int type, int protocol) {
    const int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    const int target = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) != 0)
        throw std::runtime_error("enter namespace " + ns + ": " + std::strerror(errno));
    const int fd = socket(domain, type, protocol);
    const int err = errno;
    if (setns(self, CLONE_NEWNET) != 0)
        std::abort(); // the rest of the test would run in the wrong namespace
    close(self);
    close(target);
    if (fd < 0)
        throw std::runtime_error("socket in " + ns + ": " + std::strerror(err));
    return fd;
}

using incxdp::util::Fd;

void set_timeouts(int fd, int seconds) {
    timeval tv{seconds, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

sockaddr_in addr(const std::string &ip, uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = incxdp::util::ipv4_be_or_throw(ip, "test address");
    return a;
}

uint8_t pattern(uint32_t flow, size_t off) {
    return static_cast<uint8_t>(flow * 131 + off * 7 + (off >> 9));
}

class FatTreeNetns : public ::testing::Test {
  protected:
    static inline std::optional<Topology> t_;
    static inline std::string prefix_, pin_root_;
    static inline std::vector<std::string> loaded_; // switches running the engine
    static inline std::optional<CleanupOnInterrupt> on_interrupt_;
    static inline std::string setup_error_;

    static std::string ns(const std::string &node) { return netns_name(prefix_, node); }
    static std::string pin_dir(const std::string &sw) { return pin_root_ + "/" + ns(sw); }

    static void take_down(const Topology &t, const std::string &prefix, const std::string &pins,
                          const std::vector<std::string> &loaded) {
        // The engine's pins live in bpffs, not in the namespace.
        for (const auto &sw : loaded)
            proc::run({"nsenter", "--net=/var/run/netns/" + netns_name(prefix, sw), INCXDP_CLI,
                       "unload", "--pin-dir", pins + "/" + netns_name(prefix, sw)});
        down(t, prefix);
        std::error_code ec;
        std::filesystem::remove_all(pins, ec);
    }

    static void SetUpTestSuite() {
        if (geteuid() != 0)
            return;
        prefix_ = "ixft" + std::to_string(getpid()) + "-";
        pin_root_ = "/sys/fs/bpf/incxdp-ixft" + std::to_string(getpid());
        try {
            t_ = Topology::load_file(kFile);
            // Before the first namespace: a signal during `up` finds it.
            on_interrupt_.emplace(
                [t = *t_, p = prefix_, pins = pin_root_] { take_down(t, p, pins, loaded_); });
            up(*t_, prefix_);
        } catch (const std::exception &e) {
            setup_error_ = std::string("topo up fattree4: ") + e.what();
        }
    }

    static void TearDownTestSuite() {
        if (t_)
            take_down(*t_, prefix_, pin_root_, loaded_);
        on_interrupt_.reset();
    }

    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: creates network namespaces";
        ASSERT_EQ(setup_error_, "");
    }

    // rx bytes summed over every port of each switch named in `sws`.
    static std::map<std::string, uint64_t> rx_bytes(const std::vector<std::string> &sws) {
        std::map<std::string, uint64_t> out;
        for (const auto &sw : sws) {
            const json j = json::parse(
                proc::run_ok({"ip", "-n", ns(sw), "-j", "-s", "link", "show"}, "counters"));
            for (const auto &l : j)
                if (l.value("ifname", "").rfind("p-", 0) == 0)
                    out[sw] += l.at("stats64").at("rx").at("bytes").get<uint64_t>();
        }
        return out;
    }
    static uint64_t total(const std::map<std::string, uint64_t> &m) {
        uint64_t s = 0;
        for (const auto &[k, v] : m)
            s += v;
        return s;
    }
    static std::vector<std::string> named(const char *kind, int count) {
        std::vector<std::string> v;
        for (int i = 0; i < count; ++i)
            v.push_back(kind + std::to_string(i));
        return v;
    }

    // `flows` TCP connections from `src` to `dst`, source ports sport0 + i,
    // each carrying `bytes` of a per-flow pattern that the receiver checks.
    // Returns how many flows arrived whole and intact.
    static int tcp_flows(const std::string &src, const std::string &dst, int flows, size_t bytes,
                         uint16_t sport0) {
        const uint16_t port = 5201;
        Fd lsn(socket_in(ns(dst), AF_INET, SOCK_STREAM, 0));
        const int one = 1;
        setsockopt(lsn.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        set_timeouts(lsn.get(), 10);
        const sockaddr_in la = addr("0.0.0.0", port);
        if (bind(lsn.get(), reinterpret_cast<const sockaddr *>(&la), sizeof(la)) != 0 ||
            listen(lsn.get(), flows) != 0)
            throw std::runtime_error(std::string("listen: ") + std::strerror(errno));
        int intact = 0;
        std::thread server([&] {
            for (int i = 0; i < flows; ++i) {
                Fd c(accept(lsn.get(), nullptr, nullptr));
                if (c.get() < 0)
                    return;
                set_timeouts(c.get(), 10);
                std::vector<uint8_t> got;
                uint8_t buf[65536];
                ssize_t n;
                while ((n = read(c.get(), buf, sizeof(buf))) > 0)
                    got.insert(got.end(), buf, buf + n);
                // pattern(f, 0) = 131 f mod 256 names the flow (131 is odd).
                bool ok = got.size() == bytes;
                for (uint32_t f = 0; ok && f < 256; ++f)
                    if (pattern(f, 0) == got[0]) {
                        for (size_t k = 0; ok && k < got.size(); ++k)
                            ok = got[k] == pattern(f, k);
                        break;
                    }
                intact += ok;
            }
        });
        const std::string dip = t_->node(dst).ip;
        for (int i = 0; i < flows; ++i) {
            Fd c(socket_in(ns(src), AF_INET, SOCK_STREAM, 0));
            set_timeouts(c.get(), 10);
            setsockopt(c.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            const sockaddr_in sa = addr("0.0.0.0", static_cast<uint16_t>(sport0 + i));
            const sockaddr_in da = addr(dip, port);
            if (bind(c.get(), reinterpret_cast<const sockaddr *>(&sa), sizeof(sa)) != 0 ||
                connect(c.get(), reinterpret_cast<const sockaddr *>(&da), sizeof(da)) != 0)
                break; // the server's accept times out; intact stays short
            std::vector<uint8_t> data(bytes);
            for (size_t k = 0; k < bytes; ++k)
                data[k] = pattern(static_cast<uint32_t>(i), k);
            size_t off = 0;
            while (off < bytes) {
                const ssize_t n = write(c.get(), data.data() + off, bytes - off);
                if (n <= 0)
                    break;
                off += static_cast<size_t>(n);
            }
            shutdown(c.get(), SHUT_WR);
            // Wait for the server's close, so flows do not overlap.
            uint8_t b;
            while (read(c.get(), &b, 1) > 0) {
            }
        }
        server.join();
        return intact;
    }

    // One ICMP echo from src to dst; true on the matching reply.
    static bool ping(const std::string &src, const std::string &dst, uint16_t id) {
        Fd s(socket_in(ns(src), AF_INET, SOCK_RAW, IPPROTO_ICMP));
        set_timeouts(s.get(), 5);
        icmphdr req{};
        req.type = ICMP_ECHO;
        req.un.echo.id = htons(id);
        req.un.echo.sequence = htons(1);
        uint32_t sum = 0;
        const auto *w = reinterpret_cast<const uint16_t *>(&req);
        for (size_t i = 0; i < sizeof(req) / 2; ++i)
            sum += w[i];
        while (sum >> 16)
            sum = (sum & 0xffff) + (sum >> 16);
        req.checksum = static_cast<uint16_t>(~sum);
        const sockaddr_in da = addr(t_->node(dst).ip, 0);
        if (sendto(s.get(), &req, sizeof(req), 0, reinterpret_cast<const sockaddr *>(&da),
                   sizeof(da)) != sizeof(req))
            return false;
        uint8_t buf[1500];
        for (int tries = 0; tries < 8; ++tries) {
            const ssize_t n = recv(s.get(), buf, sizeof(buf), 0);
            if (n < static_cast<ssize_t>(sizeof(iphdr) + sizeof(icmphdr)))
                return false;
            const auto *ip = reinterpret_cast<const iphdr *>(buf);
            const auto *rep = reinterpret_cast<const icmphdr *>(buf + ip->ihl * 4);
            if (ip->saddr == da.sin_addr.s_addr && rep->type == ICMP_ECHOREPLY &&
                rep->un.echo.id == htons(id))
                return true;
        }
        return false;
    }

    // Throws unless /proc/sys/<path> reads `want` in the node's namespace.
    static void expect_sysctl(const std::string &node, const std::string &path,
                              const std::string &want) {
        proc::in_netns(
            ns(node),
            [&] {
                std::ifstream f("/proc/sys/" + path);
                std::string s;
                f >> s;
                if (s != want)
                    throw std::runtime_error(path + " is '" + s + "'");
            },
            "read " + path);
    }
};

} // namespace

TEST_F(FatTreeNetns, UpCreatesNamespacesRoutesAndForwarding) {
    const TopologyStatus s = status(*t_, prefix_);
    EXPECT_EQ(s.namespaces_present(), 36u);
    EXPECT_EQ(s.state(), "up");
    for (const char *sw : {"tor0", "agg5", "core3"}) {
        EXPECT_NO_THROW(expect_sysctl(sw, "net/ipv4/ip_forward", "1")) << sw;
        EXPECT_NO_THROW(expect_sysctl(sw, "net/ipv4/fib_multipath_hash_policy", "3"))
            << "L4 5-tuple of the packet, not the socket's hash";
        EXPECT_NO_THROW(expect_sysctl(sw, "net/ipv4/fib_multipath_hash_fields", "55")) << sw;
    }
    // Hosts send the whole subnet to their ToR, which they never ARP for.
    const json r = json::parse(
        proc::run_ok({"ip", "-n", ns("h5"), "-j", "route", "show", "10.80.0.0/16"}, "route"));
    ASSERT_EQ(r.size(), 1u) << r.dump();
    EXPECT_EQ(r[0].value("gateway", ""), t_->node("tor2").ip);
    // tor0's way up is ECMP over both Aggs of pod 0.
    const json up = json::parse(
        proc::run_ok({"ip", "-n", ns("tor0"), "-j", "route", "show", "10.80.0.0/16"}, "route"));
    ASSERT_EQ(up.size(), 1u) << up.dump();
    EXPECT_EQ(up[0].at("nexthops").size(), 2u) << up.dump();
}

TEST_F(FatTreeNetns, PingAcrossEveryTier) {
    EXPECT_TRUE(ping("h0", "h1", 11)) << "same ToR";
    EXPECT_TRUE(ping("h0", "h3", 12)) << "same pod";
    EXPECT_TRUE(ping("h0", "h15", 13)) << "across pods";
    EXPECT_TRUE(ping("h9", "h4", 14)) << "across pods, back";
}

TEST_F(FatTreeNetns, TcpTakesTheTierItMust) {
    const auto aggs = named("agg", 8), cores = named("core", 4);
    const size_t bytes = 1 << 20;

    // Same ToR: no Agg and no core sees a byte.
    auto a0 = rx_bytes(aggs), c0 = rx_bytes(cores);
    EXPECT_EQ(tcp_flows("h0", "h1", 1, bytes, 40000), 1);
    EXPECT_EQ(total(rx_bytes(aggs)), total(a0)) << "h0 -> h1 left tor0";
    EXPECT_EQ(total(rx_bytes(cores)), total(c0));

    // Same pod: through an Agg of pod 0, no core.
    a0 = rx_bytes(aggs);
    c0 = rx_bytes(cores);
    EXPECT_EQ(tcp_flows("h0", "h3", 1, bytes, 40100), 1);
    const auto a1 = rx_bytes({"agg0", "agg1"});
    EXPECT_GE(a1.at("agg0") + a1.at("agg1") - a0.at("agg0") - a0.at("agg1"), bytes);
    EXPECT_EQ(total(rx_bytes(cores)), total(c0)) << "h0 -> h3 reached a core";

    // Across pods: the bytes cross a core.
    c0 = rx_bytes(cores);
    EXPECT_EQ(tcp_flows("h0", "h15", 1, bytes, 40200), 1);
    EXPECT_GE(total(rx_bytes(cores)) - total(c0), bytes) << "h0 -> h15 did not cross a core";
}

TEST_F(FatTreeNetns, EcmpSpreadsFlowsOverCores) {
    const auto cores = named("core", 4);
    const size_t bytes = 256 << 10;
    const int flows = 16;
    const auto before = rx_bytes(cores);
    EXPECT_EQ(tcp_flows("h0", "h15", flows, bytes, 41000), flows);
    const auto after = rx_bytes(cores);
    int used = 0;
    uint64_t sum = 0;
    std::string deltas;
    for (const auto &c : cores) {
        const uint64_t d = after.at(c) - before.at(c);
        sum += d;
        used += d >= bytes; // a flow's data, not just the other way's ACKs
        deltas += " " + c + " +" + std::to_string(d);
    }
    EXPECT_GE(sum, bytes * flows) << deltas;
    EXPECT_GE(used, 2) << "every flow took the same core:" << deltas;
    // With the socket's hash reused at every hop, a ToR's choice of Agg
    // fixed the Agg's choice of core and two cores stayed idle
    // (fattree_routes.cpp).
    EXPECT_GE(used, 3) << "flows polarised on two cores:" << deltas;
}

TEST_F(FatTreeNetns, ForwardsWithTheEngineLoaded) {
    // The engine on every port of the switches between pods 0 and 3.
    std::filesystem::create_directories(pin_root_);
    for (const char *sw :
         {"tor0", "agg0", "agg1", "core0", "core1", "core2", "core3", "agg6", "agg7", "tor7"}) {
        std::vector<std::string> argv = {"nsenter",   "--net=/var/run/netns/" + ns(sw),
                                         INCXDP_CLI,  "load",
                                         "--pin-dir", pin_dir(sw)};
        for (const Iface &i : t_->node(sw).ifaces) {
            argv.push_back("--iface");
            argv.push_back(i.name);
        }
        loaded_.push_back(sw);
        const auto r = proc::run(argv);
        ASSERT_EQ(r.status, 0) << sw << ": " << r.err;
    }
    const auto st =
        json::parse(proc::run_ok({"nsenter", "--net=/var/run/netns/" + ns("core2"), INCXDP_CLI,
                                  "status", "-j", "--pin-dir", pin_dir("core2")},
                                 "status"));
    EXPECT_TRUE(st.value("loaded", false)) << st.dump();

    const auto cores = named("core", 4);
    const auto c0 = rx_bytes(cores);
    EXPECT_TRUE(ping("h0", "h15", 21));
    EXPECT_EQ(tcp_flows("h0", "h15", 4, 256 << 10, 42000), 4);
    EXPECT_EQ(tcp_flows("h14", "h1", 4, 256 << 10, 42100), 4);
    EXPECT_GE(total(rx_bytes(cores)) - total(c0), 8u * (256 << 10));
}
