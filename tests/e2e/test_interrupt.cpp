// SPDX-License-Identifier: BSD-2-Clause
// A namespace test interrupted in the middle of a run (Ctrl-C, a CI runner's
// SIGTERM) leaves nothing behind: no namespace of its prefix, no pin, no
// worker; and it still dies of the signal (tests/common/interrupt_cleanup.h,
// wired into the star and tree fixtures). Runs the real suites and signals
// them once their workers run.
#include "../common/interrupt_cleanup.h"
#include "process.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <ostream>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
namespace proc = incxdp::topo::detail;
using incxdp::test::children_of;
using incxdp::test::process_alive;

struct Suite {
    const char *name;
    const char *binary;
    const char *filter; // a case that runs workers for a while
    const char *tag;    // the fixture's namespace tag
    int sig;
};

void PrintTo(const Suite &s, std::ostream *os) {
    *os << s.name << " (" << s.filter << ")";
}

std::vector<std::string> namespaces_with_prefix(const std::string &prefix) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto &e : fs::directory_iterator("/var/run/netns", ec))
        if (e.path().filename().string().rfind(prefix, 0) == 0)
            out.push_back(e.path().filename().string());
    return out;
}

class InterruptedSuite : public ::testing::TestWithParam<Suite> {
  protected:
    void SetUp() override {
        if (geteuid() != 0)
            GTEST_SKIP() << "needs root (the suites bring up namespaces)";
    }
    // Whatever the suite left, removed here so that a failure of this test
    // does not leave it on the machine either.
    void TearDown() override {
        if (pid_ <= 0)
            return;
        if (!done_) {
            kill(pid_, SIGKILL);
            waitpid(pid_, nullptr, 0);
        }
        for (pid_t w : workers_)
            if (process_alive(w))
                kill(w, SIGKILL);
        for (const auto &ns : namespaces_with_prefix(prefix_))
            proc::run({"ip", "netns", "del", ns});
        std::error_code ec;
        fs::remove_all(pins_, ec);
        fs::remove(log_, ec);
    }

    pid_t pid_ = -1;
    bool done_ = false;
    std::string prefix_, pins_, log_;
    std::vector<pid_t> workers_;
};

TEST_P(InterruptedSuite, LeavesNoNamespacePinOrWorkerAndDiesOfTheSignal) {
    const Suite &s = GetParam();
    log_ = ::testing::TempDir() + "incxdp-interrupted-" + s.name + "-" + std::to_string(getpid()) +
           ".log";
    const std::string filter = std::string("--gtest_filter=") + s.filter;
    pid_ = fork();
    if (pid_ == 0) {
        int fd = open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execl(s.binary, s.binary, filter.c_str(), static_cast<char *>(nullptr));
        _exit(127);
    }
    ASSERT_GT(pid_, 0) << "fork: " << std::strerror(errno);
    prefix_ = std::string(s.tag) + std::to_string(pid_) + "-";
    pins_ = "/sys/fs/bpf/incxdp-" + std::string(s.tag) + std::to_string(pid_);

    // Until its workers run (bring-up takes seconds; a 64 MiB run many more).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (workers_.empty() && std::chrono::steady_clock::now() < deadline) {
        int st = 0;
        if (waitpid(pid_, &st, WNOHANG) == pid_) {
            done_ = true;
            FAIL() << s.binary << " ended before its workers ran; log " << log_;
        }
        workers_ = children_of(pid_, "incxdp-worker");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_FALSE(workers_.empty()) << "no incxdp-worker of " << s.binary << " within 300 s";
    ASSERT_FALSE(namespaces_with_prefix(prefix_).empty())
        << "the suite's namespaces are not " << prefix_ << "*";
    ASSERT_TRUE(fs::exists(pins_)) << "the suite pins nothing under " << pins_;

    kill(pid_, s.sig);
    int st = 0;
    while (waitpid(pid_, &st, 0) < 0 && errno == EINTR) {
    }
    done_ = true;
    ASSERT_TRUE(WIFSIGNALED(st)) << s.binary << " exited " << WEXITSTATUS(st)
                                 << " instead of dying of " << strsignal(s.sig) << "; log " << log_;
    EXPECT_EQ(WTERMSIG(st), s.sig);
    EXPECT_EQ(namespaces_with_prefix(prefix_), std::vector<std::string>{}) << "log " << log_;
    EXPECT_FALSE(fs::exists(pins_)) << pins_ << " left behind";
    for (pid_t w : workers_)
        EXPECT_FALSE(process_alive(w)) << "worker " << w << " outlived the suite";
}

INSTANTIATE_TEST_SUITE_P(
    Suites, InterruptedSuite,
    ::testing::Values(Suite{"star", INCXDP_STAR_SUITE,
                            "StarAllreduce.Int32SumFromOneElementTo64MiB", "ixe", SIGINT},
                      Suite{"tree", INCXDP_TREE_SUITE, "Tree124.AllReduceInt32SumUpTo64MiB", "ixr",
                            SIGTERM}),
    [](const auto &info) { return std::string(info.param.name); });

} // namespace
