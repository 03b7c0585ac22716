// SPDX-License-Identifier: BSD-2-Clause
// libnccl-net-incxdp.so as NCCL uses it: dlopen, both plugin structs and
// their properties, the host-only registration rules; then, between the
// namespaces of full3 and line4 (`incxdp topo up`, one `incxdp mesh run`
// per node), one child per rank driving it as NCCL's proxy does: the handle
// through a pipe, connect/accept polled until non-NULL, grouped tagged
// receives, sends retried on NULL, test until done, sizes and bytes checked.
// The namespace tests need root.
#include "../common/mesh_cluster.h"
#include "nccl_net.h"
#include "process.h"

#include <incxdp/topology.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdarg>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using namespace incxdp;
using nlohmann::json;
namespace proc = incxdp::topo::detail;
using Clock = std::chrono::steady_clock;

std::vector<std::string> g_warnings;
void logger(ncclDebugLogLevel level, unsigned long, const char *, int, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (level == NCCL_LOG_WARN)
        g_warnings.push_back(buf);
}

struct Plugin {
    void *dl = nullptr;
    ncclNet_v8_t *v8 = nullptr;
    ncclNet_v9_t *v9 = nullptr;
    std::string error;
};
Plugin &plugin() {
    static Plugin p = [] {
        Plugin q;
        q.dl = dlopen(INCXDP_NCCL_PLUGIN, RTLD_NOW | RTLD_LOCAL);
        if (!q.dl) {
            q.error = dlerror();
            return q;
        }
        q.v8 = static_cast<ncclNet_v8_t *>(dlsym(q.dl, "ncclNetPlugin_v8"));
        q.v9 = static_cast<ncclNet_v9_t *>(dlsym(q.dl, "ncclNetPlugin_v9"));
        return q;
    }();
    return p;
}

template <typename Net> void expect_members(const Net &n) {
    EXPECT_STREQ(n.name, "incxdp");
    for (auto f : {(void *)n.init, (void *)n.devices, (void *)n.getProperties, (void *)n.listen,
                   (void *)n.connect, (void *)n.accept, (void *)n.regMr, (void *)n.regMrDmaBuf,
                   (void *)n.deregMr, (void *)n.isend, (void *)n.irecv, (void *)n.iflush,
                   (void *)n.test, (void *)n.closeSend, (void *)n.closeRecv, (void *)n.closeListen})
        EXPECT_NE(f, nullptr);
    // Device offload: a host plugin leaves it out.
    EXPECT_EQ(n.getDeviceMr, nullptr);
    EXPECT_EQ(n.irecvConsumed, nullptr);
}

template <typename Props> void expect_props(const Props &p) {
    ASSERT_NE(p.name, nullptr);
    EXPECT_STRNE(p.name, "");
    ASSERT_NE(p.pciPath, nullptr);
    EXPECT_STREQ(p.pciPath, "");
    EXPECT_EQ(p.ptrSupport, NCCL_PTR_HOST);
    EXPECT_GT(p.speed, 0);
    EXPECT_GT(p.maxComms, 0);
    EXPECT_GE(p.maxRecvs, 8);
    EXPECT_EQ(p.latency, 0.0f);
    EXPECT_EQ(p.netDeviceType, NCCL_NET_DEVICE_HOST);
    EXPECT_EQ(p.netDeviceVersion, NCCL_NET_DEVICE_INVALID_VERSION);
}

class NcclPlugin : public ::testing::Test {
  protected:
    void SetUp() override {
        ASSERT_EQ(plugin().error, "");
        ASSERT_NE(plugin().v8, nullptr) << "ncclNetPlugin_v8 not exported";
        ASSERT_NE(plugin().v9, nullptr) << "ncclNetPlugin_v9 not exported";
    }
};

TEST_F(NcclPlugin, ExportsBothVersions) {
    expect_members(*plugin().v8);
    expect_members(*plugin().v9);
    EXPECT_EQ(plugin().v9->makeVDevice, nullptr);
}

TEST_F(NcclPlugin, OneHostDeviceWithItsProperties) {
    auto &p = plugin();
    ASSERT_EQ(p.v9->init(logger), ncclSuccess);
    int n = 0;
    ASSERT_EQ(p.v8->devices(&n), ncclSuccess);
    EXPECT_EQ(n, 1);
    n = 0;
    ASSERT_EQ(p.v9->devices(&n), ncclSuccess);
    EXPECT_EQ(n, 1);

    ncclNetProperties_v8_t p8;
    ASSERT_EQ(p.v8->getProperties(0, &p8), ncclSuccess);
    expect_props(p8);
    ncclNetProperties_v9_t p9;
    ASSERT_EQ(p.v9->getProperties(0, &p9), ncclSuccess);
    expect_props(p9);
    EXPECT_EQ(p9.guid, p8.guid);
    EXPECT_EQ(p9.vProps.ndevs, 1);
    EXPECT_EQ(p9.vProps.devs[0], 0);
    EXPECT_GT(p9.maxP2pBytes, size_t(1) << 30);
    EXPECT_EQ(p9.forceFlush, 0);
    EXPECT_NE(p.v9->getProperties(1, &p9), ncclSuccess) << "there is only device 0";
}

TEST_F(NcclPlugin, HostMemoryOnly) {
    auto &p = plugin();
    ASSERT_EQ(p.v8->init(logger), ncclSuccess);
    char buf[64];
    void *mh = reinterpret_cast<void *>(1);
    EXPECT_EQ(p.v9->regMr(nullptr, buf, sizeof buf, NCCL_PTR_HOST, &mh), ncclSuccess);
    EXPECT_EQ(p.v9->deregMr(nullptr, mh), ncclSuccess);
    g_warnings.clear();
    EXPECT_EQ(p.v9->regMr(nullptr, buf, sizeof buf, NCCL_PTR_CUDA, &mh), ncclInternalError);
    EXPECT_EQ(p.v8->regMr(nullptr, buf, sizeof buf, NCCL_PTR_CUDA, &mh), ncclInternalError);
    ASSERT_FALSE(g_warnings.empty());
    EXPECT_NE(g_warnings[0].find("NCCL_PTR_HOST"), std::string::npos) << g_warnings[0];
    EXPECT_EQ(p.v9->regMrDmaBuf(nullptr, buf, sizeof buf, NCCL_PTR_DMABUF, 0, 3, &mh),
              ncclInternalError);
    EXPECT_EQ(p.v8->regMrDmaBuf(nullptr, buf, sizeof buf, NCCL_PTR_DMABUF, 0, 3, &mh),
              ncclInternalError);
    // Host memory needs no flush: done at once (NULL request).
    void *data[1] = {buf};
    int sizes[1] = {64};
    void *req = reinterpret_cast<void *>(1);
    EXPECT_EQ(p.v9->iflush(reinterpret_cast<void *>(1), 1, data, sizes, nullptr, &req),
              ncclSuccess);
    EXPECT_EQ(req, nullptr);
    int done = 0;
    EXPECT_NE(p.v9->test(nullptr, &done, nullptr), ncclSuccess);
}

using Cluster = incxdp::test::MeshCluster;

// The traffic: kGroups grouped receives of 2, 3, 4, 3, ... buffers; within
// a group the sender posts the messages in reverse tag order, so each lands
// in the buffer its tag names, not the one at its position.
constexpr int kGroups = 40;
constexpr size_t kCap = 128 << 10; // posted per buffer
int group_n(int g) {
    return g % 4 == 0 ? 2 : g % 4 == 2 ? 4 : 3;
}
int group_base(int g) {
    int b = 0;
    for (int i = 0; i < g; i++)
        b += group_n(i);
    return b;
}
int total_msgs() {
    return group_base(kGroups);
}
// Smaller than posted: test() must say how much really came.
size_t msg_size(int i) {
    return 1 + (size_t(i) * 40503u) % (kCap - 1000);
}
uint8_t msg_byte(int i, size_t j) {
    return uint8_t(i * 131 + j * 7 + (j >> 9));
}
int msg_tag(int g, int k) {
    return 100 + group_n(g) - 1 - k;
} // k-th message sent in group g

const std::chrono::seconds kPhase(40);

// One rank's side, in a forked child inside its namespace. Returns "" or
// what went wrong.
template <typename Net> struct Rank {
    Net *net;
    using Size = std::conditional_t<std::is_same_v<Net, ncclNet_v8_t>, int, size_t>;

    std::string receiver(int handle_w, int done_r) {
        if (net->init(logger) != ncclSuccess)
            return "init failed";
        char handle[NCCL_NET_HANDLE_MAXSIZE] = {};
        void *lc = nullptr;
        if (net->listen(0, handle, &lc) != ncclSuccess || !lc)
            return "listen failed: " + last_warning();
        void *rc = nullptr;
        if (net->accept(lc, &rc, nullptr) != ncclSuccess || rc)
            return "accept before any connect did not return a NULL comm";
        if (write(handle_w, handle, sizeof handle) != ssize_t(sizeof handle))
            return "handle pipe write failed";
        auto deadline = Clock::now() + kPhase;
        while (!rc) {
            if (net->accept(lc, &rc, nullptr) != ncclSuccess)
                return "accept failed: " + last_warning();
            if (Clock::now() > deadline)
                return "accept still NULL after 40 s";
        }
        std::vector<std::vector<uint8_t>> bufs(total_msgs(), std::vector<uint8_t>(kCap, 0xEE));
        std::vector<void *> reqs(kGroups, nullptr);
        size_t in_flight = 0, max_in_flight = 0;
        int posted = 0, completed = 0;
        std::vector<bool> done(kGroups, false);
        deadline = Clock::now() + kPhase;
        while (completed < kGroups) {
            if (Clock::now() > deadline)
                return "receives not done after 40 s: " + std::to_string(completed) + " of " +
                       std::to_string(kGroups);
            while (posted < kGroups) {
                int n = group_n(posted), base = group_base(posted);
                void *data[4];
                Size sizes[4];
                int tags[4];
                for (int t = 0; t < n; t++) {
                    data[t] = bufs[base + t].data();
                    sizes[t] = Size(kCap);
                    tags[t] = 100 + t;
                }
                void *r = nullptr;
                if (net->irecv(rc, n, data, sizes, tags, nullptr, &r) != ncclSuccess)
                    return "irecv failed: " + last_warning();
                if (!r)
                    break; // try later, as NCCL does
                reqs[posted++] = r;
                max_in_flight = std::max(max_in_flight, ++in_flight);
            }
            for (int g = 0; g < posted; g++) {
                if (done[g])
                    continue;
                int d = 0, sizes[4] = {-1, -1, -1, -1};
                if (net->test(reqs[g], &d, sizes) != ncclSuccess)
                    return "test (recv) failed: " + last_warning();
                if (!d)
                    continue;
                done[g] = true;
                completed++;
                in_flight--;
                if (std::string e = check_group(g, bufs, sizes); !e.empty())
                    return e;
            }
        }
        if (max_in_flight < NCCL_NET_MAX_REQUESTS)
            return "only " + std::to_string(max_in_flight) + " receives in flight";
        // Keep acknowledging until the sender has seen every ack.
        pollfd pfd{done_r, POLLIN, 0};
        deadline = Clock::now() + kPhase;
        while (poll(&pfd, 1, 0) == 0 && Clock::now() < deadline) {
            void *none = nullptr;
            if (net->accept(lc, &none, nullptr) != ncclSuccess)
                return "accept (progress) failed: " + last_warning();
        }
        if (net->closeRecv(rc) != ncclSuccess || net->closeListen(lc) != ncclSuccess)
            return "close failed: " + last_warning();
        return "";
    }

    static std::string check_group(int g, const std::vector<std::vector<uint8_t>> &bufs,
                                   const int *sizes) {
        int n = group_n(g), base = group_base(g);
        for (int t = 0; t < n; t++) {
            int msg = base + (n - 1 - t); // the message sent with tag 100 + t
            size_t want = msg_size(msg);
            std::string where = "group " + std::to_string(g) + " tag " + std::to_string(100 + t);
            if (sizes[t] != int(want))
                return where + ": test size " + std::to_string(sizes[t]) + ", sent " +
                       std::to_string(want);
            const auto &b = bufs[base + t];
            for (size_t j = 0; j < want; j++)
                if (b[j] != msg_byte(msg, j))
                    return where + ": byte " + std::to_string(j) + " differs";
            for (size_t j = want; j < kCap; j++)
                if (b[j] != 0xEE)
                    return where + ": written past the real size at " + std::to_string(j);
        }
        return "";
    }

    std::string sender(int handle_r, int done_w) {
        if (net->init(logger) != ncclSuccess)
            return "init failed";
        char handle[NCCL_NET_HANDLE_MAXSIZE];
        if (read(handle_r, handle, sizeof handle) != ssize_t(sizeof handle))
            return "no handle from the receiver";
        void *sc = nullptr;
        auto deadline = Clock::now() + kPhase;
        while (!sc) {
            if (net->connect(0, handle, &sc, nullptr) != ncclSuccess)
                return "connect failed: " + last_warning();
            if (Clock::now() > deadline)
                return "connect still NULL after 40 s";
        }
        int total = total_msgs();
        std::vector<std::vector<uint8_t>> msgs(total);
        std::vector<int> tags(total);
        for (int g = 0; g < kGroups; g++)
            for (int k = 0; k < group_n(g); k++) {
                int i = group_base(g) + k;
                tags[i] = msg_tag(g, k);
                msgs[i].resize(msg_size(i));
                for (size_t j = 0; j < msgs[i].size(); j++)
                    msgs[i][j] = msg_byte(i, j);
            }
        std::vector<void *> reqs(total, nullptr);
        std::vector<bool> done(total, false);
        int posted = 0, completed = 0;
        size_t in_flight = 0, max_in_flight = 0;
        deadline = Clock::now() + kPhase;
        while (completed < total) {
            if (Clock::now() > deadline)
                return "sends not done after 40 s: " + std::to_string(completed) + " of " +
                       std::to_string(total);
            while (posted < total) {
                void *r = nullptr;
                if (net->isend(sc, msgs[posted].data(), Size(msgs[posted].size()), tags[posted],
                               nullptr, &r) != ncclSuccess)
                    return "isend failed: " + last_warning();
                if (!r)
                    break;
                reqs[posted++] = r;
                max_in_flight = std::max(max_in_flight, ++in_flight);
            }
            for (int i = 0; i < posted; i++) {
                if (done[i])
                    continue;
                int d = 0, size = -1;
                if (net->test(reqs[i], &d, &size) != ncclSuccess)
                    return "test (send) failed: " + last_warning();
                if (!d)
                    continue;
                if (size != int(msgs[i].size()))
                    return "send " + std::to_string(i) + ": test size " + std::to_string(size);
                done[i] = true;
                completed++;
                in_flight--;
            }
        }
        if (max_in_flight < NCCL_NET_MAX_REQUESTS)
            return "only " + std::to_string(max_in_flight) + " sends in flight";
        if (net->closeSend(sc) != ncclSuccess)
            return "closeSend failed: " + last_warning();
        char one = 1;
        if (write(done_w, &one, 1) != 1)
            return "done pipe write failed";
        return "";
    }

    static std::string last_warning() { return g_warnings.empty() ? "" : g_warnings.back(); }
};

// Forks a child that joins `netns`, points the plugin at its daemon's pins
// and runs fn; its error comes back through a pipe.
struct Child {
    pid_t pid = -1;
    int err_r = -1;
};
// `close_fds`: the pipe ends that are not the child's, so that a peer's
// death reads as end of file instead of a wait forever.
template <typename Fn>
Child spawn_in(const std::string &netns, const std::string &pin, std::vector<int> close_fds,
               Fn fn) {
    int p[2];
    if (pipe(p) != 0)
        return {};
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        for (int fd : close_fds)
            close(fd);
        std::string e;
        int fd = open(("/var/run/netns/" + netns).c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
            e = "setns " + netns + ": " + strerror(errno);
        else {
            setenv("INCXDP_MESH_PIN_DIR", pin.c_str(), 1);
            try {
                e = fn();
            } catch (const std::exception &x) {
                e = x.what();
            }
        }
        if (!e.empty() && write(p[1], e.data(), e.size()) < 0)
            _exit(2);
        _exit(e.empty() ? 0 : 1);
    }
    close(p[1]);
    return {pid, p[0]};
}

std::string reap(Child c, const std::string &who) {
    if (c.pid < 0)
        return who + ": fork failed";
    std::string msg;
    char buf[512];
    ssize_t k;
    while ((k = read(c.err_r, buf, sizeof buf)) > 0)
        msg.append(buf, size_t(k));
    close(c.err_r);
    int st = 0;
    waitpid(c.pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0)
        return "";
    return who + ": " + (msg.empty() ? "exit status " + std::to_string(st) : msg);
}

class NcclPluginNetns : public NcclPlugin {
  protected:
    static inline std::map<std::string, Cluster *> clusters_;
    static Cluster &cluster(const std::string &name) {
        auto &c = clusters_[name];
        if (!c) {
            c = new Cluster;
            c->bring_up(name, "ncl" + name.substr(0, 1) + name.substr(name.size() - 1));
        }
        return *c;
    }
    static void TearDownTestSuite() {
        for (auto &[n, c] : clusters_) {
            c->take_down();
            delete c;
        }
        clusters_.clear();
    }
    void SetUp() override {
        NcclPlugin::SetUp();
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root: network namespaces, XDP";
    }

    template <typename Net>
    void transfer(Net *net, const std::string &topo_name, size_t from, size_t to) {
        Cluster &c = cluster(topo_name);
        ASSERT_EQ(c.error, "");
        int handle[2], done[2];
        ASSERT_EQ(pipe(handle), 0);
        ASSERT_EQ(pipe(done), 0);
        Rank<Net> r{net};
        Child rx = spawn_in(c.ns(c.hosts[to]), c.pin(c.hosts[to]), {handle[0], done[1]},
                            [&] { return r.receiver(handle[1], done[0]); });
        Child tx =
            spawn_in(c.ns(c.hosts[from]), c.pin(c.hosts[from]), {handle[1], done[0], rx.err_r},
                     [&] { return r.sender(handle[0], done[1]); });
        for (int fd : {handle[0], handle[1], done[0], done[1]})
            close(fd);
        EXPECT_EQ(reap(tx, "sender " + c.hosts[from]), "");
        EXPECT_EQ(reap(rx, "receiver " + c.hosts[to]), "");
    }
};

TEST_F(NcclPluginNetns, Full3V8Direct) {
    transfer(plugin().v8, "full3", 0, 1);
}
TEST_F(NcclPluginNetns, Full3V9Direct) {
    transfer(plugin().v9, "full3", 2, 1);
}
// n0 -> n3 crosses n1 and n2, which relay in XDP.
TEST_F(NcclPluginNetns, Line4V9ThroughRelays) {
    transfer(plugin().v9, "line4", 0, 3);
}

} // namespace
