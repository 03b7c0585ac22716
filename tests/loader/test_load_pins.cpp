// SPDX-License-Identifier: BSD-2-Clause
// `incxdp load` pins incxdp_parents (the native trees' parent links, the map
// only the BPF tests used so far) in --pin-dir with the layout of the
// contract (bpf/include/incxdp/maps.h); `incxdp unload` keeps it, and what
// the control plane wrote there, while a port is left, and removes it, with
// the directory, with the last port. One namespace of our own with a veth
// pair, a pin directory of our own. Root.
#include "../common/interrupt_cleanup.h"
#include "process.h"

#include <incxdp/maps.h>

#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <sys/stat.h>
#include <unistd.h>
#include <vector>

namespace {

using incxdp::test::CleanupOnInterrupt;
namespace proc = incxdp::topo::detail;

bool exists(const std::string &path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0;
}

class LoadPins : public ::testing::Test {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root (a namespace, XDP, bpffs)";
        cleanup_ = std::make_unique<CleanupOnInterrupt>([this] { remove_all(); });
        proc::run_ok({"ip", "netns", "add", ns_}, "test namespace");
        proc::run_ok(
            {"ip", "-n", ns_, "link", "add", "lp-a", "type", "veth", "peer", "name", "lp-b"},
            "veth pair");
        for (const char *dev : {"lp-a", "lp-b"})
            proc::run_ok({"ip", "-n", ns_, "link", "set", dev, "up"}, "veth up");
    }
    void TearDown() override {
        if (cleanup_)
            remove_all();
        cleanup_.reset();
    }
    // Also what an interrupt runs: removing the namespace detaches the
    // programs and the veths; the pins go by hand.
    void remove_all() const {
        proc::run({"ip", "netns", "del", ns_});
        proc::run({"rm", "-rf", pins_});
    }

    proc::ProcResult cli(std::vector<std::string> args) const {
        std::vector<std::string> argv{"nsenter", "--net=/var/run/netns/" + ns_, INCXDP_CLI};
        argv.insert(argv.end(), args.begin(), args.end());
        return proc::run(argv);
    }
    void cli_ok(const std::vector<std::string> &args) const {
        const proc::ProcResult r = cli(args);
        ASSERT_EQ(r.status, 0) << proc::join_argv(args) << ": " << r.err << r.out;
    }

    // The pinned map's id, checked against the contract; 0 if it is not there.
    uint32_t parents_id() const {
        const int fd = bpf_obj_get(parents_.c_str());
        if (fd < 0)
            return 0;
        bpf_map_info info{};
        uint32_t len = sizeof(info);
        const int err = bpf_obj_get_info_by_fd(fd, &info, &len);
        ::close(fd);
        EXPECT_EQ(err, 0) << std::strerror(errno);
        EXPECT_STREQ(info.name, INCXDP_MAP_PARENTS);
        EXPECT_EQ(info.key_size, sizeof(uint32_t));
        EXPECT_EQ(info.value_size, sizeof(incxdp_parent));
        EXPECT_EQ(info.max_entries, uint32_t(INCXDP_MAX_JOBS));
        return info.id;
    }

    const std::string ns_ = "ixl" + std::to_string(getpid()) + "-sw";
    const std::string pins_ = "/sys/fs/bpf/incxdp-ixl" + std::to_string(getpid());
    const std::string parents_ = pins_ + "/" + INCXDP_MAP_PARENTS;
    std::unique_ptr<CleanupOnInterrupt> cleanup_;
};

TEST_F(LoadPins, LoadPinsParentsUnloadKeepsThemWhileAPortIsLeft) {
    ASSERT_FALSE(exists(pins_)) << pins_ << " exists before the test";
    cli_ok({"load", "-i", "lp-a", "-i", "lp-b", "--pin-dir", pins_});
    const uint32_t id = parents_id();
    ASSERT_NE(id, 0u) << "incxdp load pinned no " << parents_;

    // What `incxdp apply` writes for a job below the root.
    const uint32_t job = 7;
    incxdp_parent p{};
    p.ifindex = 3;
    p.rank = 2;
    p.src_port = htons(0xC000 | job);
    {
        const int fd = bpf_obj_get(parents_.c_str());
        ASSERT_GE(fd, 0) << std::strerror(errno);
        ASSERT_EQ(bpf_map_update_elem(fd, &job, &p, BPF_ANY), 0) << std::strerror(errno);
        ::close(fd);
    }

    cli_ok({"unload", "-i", "lp-a", "--pin-dir", pins_});
    EXPECT_EQ(parents_id(), id) << "unloading one of two ports removed the parents map";
    {
        const int fd = bpf_obj_get(parents_.c_str());
        ASSERT_GE(fd, 0) << std::strerror(errno);
        incxdp_parent got{};
        ASSERT_EQ(bpf_map_lookup_elem(fd, &job, &got), 0) << std::strerror(errno);
        ::close(fd);
        EXPECT_EQ(std::memcmp(&got, &p, sizeof(p)), 0) << "the parent entry of job 7 changed";
    }

    cli_ok({"unload", "--pin-dir", pins_});
    EXPECT_FALSE(exists(parents_)) << "incxdp unload left " << parents_;
    EXPECT_FALSE(exists(pins_)) << "incxdp unload left " << pins_;
    const proc::ProcResult st = cli({"status", "--pin-dir", pins_});
    EXPECT_NE(st.out.find("not loaded"), std::string::npos) << st.out << st.err;
}

// A port loaded next to a running engine shares its maps: the kernel marks
// every devmap BPF_F_RDONLY_PROG, which libbpf 1.1 took for a mismatch with
// the pinned incxdp_ports (EINVAL on the second load).
TEST_F(LoadPins, APortLoadedLaterSharesTheRunningEnginesMaps) {
    ASSERT_FALSE(exists(pins_)) << pins_ << " exists before the test";
    cli_ok({"load", "-i", "lp-a", "--pin-dir", pins_});
    const uint32_t id = parents_id();
    ASSERT_NE(id, 0u) << "incxdp load pinned no " << parents_;
    cli_ok({"load", "-i", "lp-b", "--pin-dir", pins_});
    EXPECT_EQ(parents_id(), id) << "the second load replaced the parents map";
    const proc::ProcResult st = cli({"status", "--pin-dir", pins_});
    EXPECT_NE(st.out.find("lp-a"), std::string::npos) << st.out << st.err;
    EXPECT_NE(st.out.find("lp-b"), std::string::npos) << st.out << st.err;
    cli_ok({"unload", "--pin-dir", pins_});
    EXPECT_FALSE(exists(pins_)) << "incxdp unload left " << pins_;
}

} // namespace
