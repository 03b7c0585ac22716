// SPDX-License-Identifier: BSD-2-Clause
// The mesh relay end to end on a line of three namespaces a - b - c (one
// veth pair and one subnet per link), in native and in skb mode: the relay
// attached with relay::attach() on every interface of every node, a route
// to c installed by hand on b, a relay frame sent by a plain UDP socket in
// a to b's address arrives at c's UDP socket on the relay port, readdressed
// by b, hops + 1, and b counts one FORWARD. Then detach() leaves no program
// and no pin. Needs root.
#include "../common/interrupt_cleanup.h"
#include "process.h"

#include <incxdp/capture.h>
#include <incxdp/chaos_ctl.h>
#include <incxdp/relay_ctl.h>
#include <incxdp/util/ipv4.h>
#include <incxdp/util/mac.h>
#include <incxdp/xdp_prog_maps.h>

#include <arpa/inet.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using namespace incxdp;
using incxdp::test::CleanupOnInterrupt;
namespace proc = incxdp::topo::detail;

constexpr uint32_t kNodeA = 0x0a0a0001, kNodeB = 0x0b0b0002, kNodeC = 0x0c0c0003;
const char *const kMacBtoC = "02:52:4c:00:02:01"; // b's end of the b-c link
const char *const kMacCtoB = "02:52:4c:00:02:02";

bool exists(const std::string &path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

uint32_t be_ip(const char *s) {
    return incxdp::util::ipv4_be_or_throw(s, "test address");
}

// Runs fn with the calling thread in /var/run/netns/<ns>: sockets and
// interface lookups made meanwhile belong to that namespace.
template <typename F> auto in_ns(const std::string &ns, F fn) {
    const int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    const int target = open(("/var/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (self < 0 || target < 0 || setns(target, CLONE_NEWNET) != 0)
        throw std::runtime_error("enter namespace " + ns + ": " + std::strerror(errno));
    struct Back {
        int self, target;
        ~Back() {
            if (setns(self, CLONE_NEWNET) != 0)
                std::abort(); // the rest of the test would run in the wrong namespace
            close(self);
            close(target);
        }
    } back{self, target};
    return fn();
}

class Sock {
  public:
    explicit Sock(int fd) : fd_(fd) {}
    ~Sock() {
        if (fd_ >= 0)
            close(fd_);
    }
    Sock(const Sock &) = delete;
    Sock &operator=(const Sock &) = delete;
    int get() const { return fd_; }

  private:
    int fd_;
};

// incxdp_relay_hdr (relay.h), big-endian, then the payload.
std::vector<uint8_t> relay_datagram(uint32_t dst_node, const std::string &payload) {
    incxdp_relay_hdr h{};
    h.magic = htons(INCXDP_RELAY_MAGIC);
    h.version = INCXDP_RELAY_VERSION;
    h.kind = INCXDP_RELAY_KIND_P2P;
    h.hops = 0;
    h.total_hops = 2;
    h.src_node = htonl(kNodeA);
    h.dst_node = htonl(dst_node);
    h.session = htonl(77);
    h.payload_len = htonl(uint32_t(payload.size()));
    std::vector<uint8_t> d(sizeof(h) + payload.size());
    std::memcpy(d.data(), &h, sizeof(h));
    std::memcpy(d.data() + sizeof(h), payload.data(), payload.size());
    return d;
}

class RelayLine : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: creates network namespaces and attaches XDP";
        tag_ = "rly" + std::to_string(getpid()) + GetParam();
        pin_root_ = "/sys/fs/bpf/incxdp-" + tag_;
        on_interrupt_.emplace([this] { take_down(); });
        ASSERT_NO_THROW(bring_up());
    }

    void TearDown() override {
        if (geteuid() != 0)
            return;
        try {
            take_down();
        } catch (const std::exception &e) {
            ADD_FAILURE() << "cleanup: " << e.what();
        }
        on_interrupt_.reset();
    }

    std::string ns(char node) const { return tag_ + "-" + node; }
    std::string pin(char node) const { return pin_root_ + "/" + node; }

    void ip(std::vector<std::string> args) {
        args.insert(args.begin(), "ip");
        proc::run_ok(args, "relay line " + tag_);
    }

    // a:to-b 10.201.1.1 -- 10.201.1.2 b:to-a, b:to-c 10.201.2.1 -- 10.201.2.2 c:to-b
    void bring_up() {
        for (char n : {'a', 'b', 'c'}) {
            ip({"netns", "add", ns(n)});
            created_.push_back(n);
            proc::run_ok({"nsenter", "--net=/var/run/netns/" + ns(n), "sysctl", "-qw",
                          "net.ipv6.conf.all.disable_ipv6=1",
                          "net.ipv6.conf.default.disable_ipv6=1"},
                         "disable IPv6 in " + ns(n));
            ip({"-n", ns(n), "link", "set", "lo", "up"});
        }
        ip({"link", "add", "to-b", "netns", ns('a'), "type", "veth", "peer", "name", "to-a",
            "netns", ns('b')});
        ip({"link", "add", "to-c", "netns", ns('b'), "address", kMacBtoC, "type", "veth", "peer",
            "name", "to-b", "netns", ns('c'), "address", kMacCtoB});
        struct Addr {
            char node;
            const char *dev, *cidr;
        };
        for (const Addr &a :
             {Addr{'a', "to-b", "10.201.1.1/24"}, Addr{'b', "to-a", "10.201.1.2/24"},
              Addr{'b', "to-c", "10.201.2.1/24"}, Addr{'c', "to-b", "10.201.2.2/24"}}) {
            ip({"-n", ns(a.node), "addr", "add", a.cidr, "dev", a.dev});
            ip({"-n", ns(a.node), "link", "set", a.dev, "up"});
        }
        const std::string mode = GetParam();
        struct Node {
            char name;
            uint32_t id;
            std::vector<std::string> ifaces;
        };
        for (const Node &n : {Node{'a', kNodeA, {"to-b"}}, Node{'b', kNodeB, {"to-a", "to-c"}},
                              Node{'c', kNodeC, {"to-b"}}}) {
            proc::in_netns(
                ns(n.name),
                [&] {
                    relay::attach(pin(n.name), n.ifaces, mode);
                    relay::RelayMaps::open(pin(n.name))
                        .set_config({n.id, true, INCXDP_RELAY_DEFAULT_MAX_HOPS});
                },
                "attach the relay in " + ns(n.name));
        }
    }

    // Namespaces (with their veths and XDP programs) and pins gone.
    void take_down() {
        for (char n : created_)
            if (exists("/var/run/netns/" + ns(n)))
                proc::run({"ip", "netns", "del", ns(n)});
        created_.clear();
        if (exists(pin_root_))
            proc::run({"rm", "-rf", pin_root_});
    }

    // The route b holds to c: out of to-c, addressed for the b-c link.
    incxdp_relay_route route_b_to_c() {
        incxdp_relay_route r{};
        r.hops = 1;
        r.nnexthops = 1;
        r.nh[0].ifindex = in_ns(ns('b'), [] { return if_nametoindex("to-c"); });
        auto s = util::mac_or_throw(kMacBtoC), d = util::mac_or_throw(kMacCtoB);
        std::memcpy(r.nh[0].src_mac, s.data(), 6);
        std::memcpy(r.nh[0].dst_mac, d.data(), 6);
        r.nh[0].src_ip = be_ip("10.201.2.1");
        r.nh[0].dst_ip = be_ip("10.201.2.2");
        return r;
    }

    std::string tag_, pin_root_;
    std::vector<char> created_;
    std::optional<CleanupOnInterrupt> on_interrupt_;
};

// A relay frame for c, sent by a plain UDP socket in a to b's address.
void send_from_a_to_c(const std::string &ns_a, const std::vector<uint8_t> &datagram) {
    Sock tx(in_ns(ns_a, [] { return socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); }));
    ASSERT_GE(tx.get(), 0) << strerror(errno);
    sockaddr_in to_b{};
    to_b.sin_family = AF_INET;
    to_b.sin_port = htons(INCXDP_RELAY_UDP_PORT);
    to_b.sin_addr.s_addr = be_ip("10.201.1.2");
    ASSERT_EQ(sendto(tx.get(), datagram.data(), datagram.size(), 0,
                     reinterpret_cast<sockaddr *>(&to_b), sizeof(to_b)),
              ssize_t(datagram.size()))
        << strerror(errno);
}

TEST_P(RelayLine, FrameFromAReachesCThroughB) {
    auto b = relay::RelayMaps::open(pin('b'));
    ASSERT_NE(b.config().self_node, 0u);
    EXPECT_EQ(b.tx_ports().size(), 2u) << "attach() adds every interface to incxdp_relay_tx";
    b.set_route(kNodeC, route_b_to_c());
    ASSERT_EQ(b.routes().count(kNodeC), 1u);
    auto c = relay::RelayMaps::open(pin('c'));

    Sock rx(in_ns(ns('c'), [] { return socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0); }));
    ASSERT_GE(rx.get(), 0);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_port = htons(INCXDP_RELAY_UDP_PORT);
    ASSERT_EQ(bind(rx.get(), reinterpret_cast<sockaddr *>(&any), sizeof(any)), 0)
        << strerror(errno);
    timeval tv{5, 0};
    setsockopt(rx.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

    b.reset_stats();
    c.reset_stats();
    const std::string payload = "through b, never its stack";
    const auto sent = relay_datagram(kNodeC, payload);
    ASSERT_NO_FATAL_FAILURE(send_from_a_to_c(ns('a'), sent));

    std::vector<uint8_t> got(2048);
    sockaddr_in from{};
    socklen_t fromlen = sizeof(from);
    ssize_t n = recvfrom(rx.get(), got.data(), got.size(), 0, reinterpret_cast<sockaddr *>(&from),
                         &fromlen);
    ASSERT_EQ(n, ssize_t(sent.size()))
        << "nothing (or something else) arrived at c: " << strerror(errno);
    got.resize(size_t(n));
    EXPECT_EQ(from.sin_addr.s_addr, be_ip("10.201.2.1"))
        << "b readdresses the frame from its end of b-c";
    incxdp_relay_hdr h{};
    std::memcpy(&h, got.data(), sizeof(h));
    EXPECT_EQ(h.hops, 1) << "one relay crossed";
    EXPECT_EQ(ntohl(h.dst_node), kNodeC);
    EXPECT_EQ(std::string(got.begin() + sizeof(h), got.end()), payload);

    const auto bs = b.stats(), cs = c.stats();
    EXPECT_EQ(bs[INCXDP_RELAY_STAT_FORWARD], 1u) << "b forwards the frame in XDP";
    EXPECT_EQ(bs[INCXDP_RELAY_STAT_DELIVER_STACK], 0u) << "b's stack never sees it";
    EXPECT_EQ(cs[INCXDP_RELAY_STAT_DELIVER_STACK], 1u) << "c hands it to its UDP socket";
}

// `incxdp chaos --xdp` and `incxdp capture` find their maps in the relay
// (the prologue every incxdp program runs): 100% loss on c's link takes the
// frame b forwarded, counted as c's `chaos`, never delivered.
TEST_P(RelayLine, ChaosAndCaptureReachTheRelay) {
    for (const char *dev : {"to-a", "to-c"}) {
        int fd = in_ns(ns('b'), [&] {
            return xdpmaps::map_fd_on_iface(int(if_nametoindex(dev)), INCXDP_CAPTURE_MAP,
                                            BPF_MAP_TYPE_PERF_EVENT_ARRAY);
        });
        EXPECT_GE(fd, 0) << "no " INCXDP_CAPTURE_MAP " on b:" << dev
                         << ": `incxdp capture` would miss it";
        if (fd >= 0)
            close(fd);
    }
    auto b = relay::RelayMaps::open(pin('b'));
    b.set_route(kNodeC, route_b_to_c());
    auto c = relay::RelayMaps::open(pin('c'));
    proc::in_netns(
        ns('c'),
        [&] {
            ctl::chaos::RateUpdate loss;
            loss.loss_ppm = INCXDP_CHAOS_PPM;
            ctl::chaos::set("to-b", ctl::chaos::Hook::Xdp, loss, pin_root_ + "/chaos");
        },
        "chaos --xdp on c:to-b");
    b.reset_stats();
    c.reset_stats();
    ASSERT_NO_FATAL_FAILURE(send_from_a_to_c(ns('a'), relay_datagram(kNodeC, "lost on b-c")));
    // Bounded wait for the frame to reach c's program (not a timing check).
    for (int i = 0; i < 50 && c.stats()[INCXDP_RELAY_STAT_CHAOS] == 0; i++)
        usleep(100 * 1000);
    const auto bs = b.stats(), cs = c.stats();
    EXPECT_EQ(bs[INCXDP_RELAY_STAT_FORWARD], 1u);
    EXPECT_EQ(cs[INCXDP_RELAY_STAT_CHAOS], 1u)
        << "c's relay must hand the frame to the fault injector";
    EXPECT_EQ(cs[INCXDP_RELAY_STAT_DELIVER_STACK], 0u) << "a lost frame is never delivered";
}

TEST_P(RelayLine, AttachRefusesAnInterfaceItRunsOn) {
    try {
        proc::in_netns(
            ns('b'), [&] { relay::attach(pin('b'), {"to-c"}, GetParam()); }, "attach again");
        ADD_FAILURE() << "a second attach to to-c succeeded";
    } catch (const std::exception &e) {
        EXPECT_NE(std::string(e.what()).find("already runs on to-c"), std::string::npos)
            << e.what();
    }
}

TEST_P(RelayLine, DetachRemovesProgramsAndPins) {
    proc::in_netns(
        ns('b'), [&] { relay::detach(pin('b')); }, "detach the relay in " + ns('b'));
    EXPECT_FALSE(exists(pin('b'))) << "the pin directory must be gone";
    EXPECT_FALSE(relay::present(pin('b')));
    for (const char *dev : {"to-a", "to-c"}) {
        LIBBPF_OPTS(bpf_xdp_query_opts, q);
        int err = in_ns(ns('b'), [&] { return bpf_xdp_query(int(if_nametoindex(dev)), 0, &q); });
        EXPECT_EQ(err, 0);
        EXPECT_EQ(q.prog_id, 0u) << "an XDP program is still attached to b:" << dev;
    }
    // a's and c's relays are another node's: untouched.
    EXPECT_TRUE(relay::present(pin('a')));
    EXPECT_TRUE(relay::present(pin('c')));
}

TEST(RelayMapsOpen, NamesTheDirectoryAndTheRemedy) {
    const std::string dir = "/sys/fs/bpf/incxdp-rly" + std::to_string(getpid()) + "-none";
    if (geteuid() != 0)
        GTEST_SKIP() << "reads bpffs";
    try {
        relay::RelayMaps::open(dir);
        ADD_FAILURE() << "opened a relay that does not exist";
    } catch (const ctl::CtlError &e) {
        EXPECT_NE(std::string(e.what()).find(dir), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("incxdp mesh run"), std::string::npos) << e.what();
    }
}

INSTANTIATE_TEST_SUITE_P(Modes, RelayLine, ::testing::Values("native", "skb"),
                         [](const ::testing::TestParamInfo<std::string> &i) { return i.param; });

} // namespace
