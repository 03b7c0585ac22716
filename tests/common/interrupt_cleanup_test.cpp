// SPDX-License-Identifier: BSD-2-Clause
// CleanupOnInterrupt (interrupt_cleanup.h) in a real process
// (interrupt_probe.cpp): signalled or crashing, the probe's cleanup runs, its
// child is stopped, and it still dies of its signal; without a registration
// nothing runs.
#include "interrupt_cleanup.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using incxdp::test::process_alive;

struct Probe {
    pid_t pid = -1;
    pid_t child = -1;
    std::string marker;
};

bool exists(const std::string &path) {
    struct stat st {};
    return stat(path.c_str(), &st) == 0;
}

// Starts the probe and waits for its "ready" line.
Probe start(const std::string &mode) {
    static int seq = 0;
    Probe p;
    p.marker = ::testing::TempDir() + "interrupt-probe-" + std::to_string(getpid()) + "-" +
               std::to_string(seq++);
    int out[2];
    if (pipe(out) != 0)
        return p;
    p.pid = fork();
    if (p.pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        close(out[1]);
        execl(INCXDP_INTERRUPT_PROBE, INCXDP_INTERRUPT_PROBE, p.marker.c_str(), mode.c_str(),
              static_cast<char *>(nullptr));
        _exit(127);
    }
    close(out[1]);
    FILE *f = fdopen(out[0], "r");
    int child = -1;
    if (std::fscanf(f, "ready %d", &child) == 1)
        p.child = child;
    std::fclose(f);
    return p;
}

// The probe's end: the signal that ended it, or -exit status.
int end_of(pid_t pid) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    return WIFSIGNALED(st) ? WTERMSIG(st) : -WEXITSTATUS(st);
}

class InterruptCleanup : public ::testing::TestWithParam<int> {};

TEST_P(InterruptCleanup, ASignalRunsTheCleanupStopsTheChildrenAndStillEndsTheProcess) {
    const int sig = GetParam();
    Probe p = start("wait");
    ASSERT_GT(p.child, 0) << "the probe did not start";
    ASSERT_TRUE(exists(p.marker));
    kill(p.pid, sig);
    EXPECT_EQ(end_of(p.pid), sig) << strsignal(sig);
    EXPECT_FALSE(exists(p.marker)) << "the cleanup did not run";
    EXPECT_FALSE(process_alive(p.child)) << "the probe's child " << p.child << " outlived it";
    if (process_alive(p.child))
        kill(p.child, SIGKILL);
}

INSTANTIATE_TEST_SUITE_P(Signals, InterruptCleanup, ::testing::Values(SIGINT, SIGTERM, SIGHUP),
                         [](const auto &info) { return std::string(sigabbrev_np(info.param)); });

TEST(InterruptCleanupCrash, ANullWriteRunsTheCleanupAndDiesOfSigsegv) {
    Probe p = start("segv");
    ASSERT_GT(p.child, 0);
    EXPECT_EQ(end_of(p.pid), SIGSEGV);
    EXPECT_FALSE(exists(p.marker));
    EXPECT_FALSE(process_alive(p.child));
}

TEST(InterruptCleanupCrash, AbortRunsTheCleanupAndDiesOfSigabrt) {
    Probe p = start("abort");
    ASSERT_GT(p.child, 0);
    EXPECT_EQ(end_of(p.pid), SIGABRT);
    EXPECT_FALSE(exists(p.marker));
    EXPECT_FALSE(process_alive(p.child));
}

// main() returning (gtest's, once the interrupted test fails fast) must not
// end the process before the cleanup has run.
TEST(InterruptCleanupExit, AProcessThatReturnsMeanwhileWaitsForTheCleanup) {
    Probe p = start("return");
    ASSERT_GT(p.child, 0);
    kill(p.pid, SIGTERM);
    EXPECT_EQ(end_of(p.pid), SIGTERM);
    EXPECT_FALSE(exists(p.marker));
}

TEST(InterruptCleanupExit, AWithdrawnCleanupDoesNotRun) {
    Probe p = start("withdrawn");
    ASSERT_GT(p.child, 0);
    kill(p.pid, SIGTERM);
    EXPECT_EQ(end_of(p.pid), SIGTERM);
    EXPECT_TRUE(exists(p.marker)) << "a cleanup no longer registered ran";
    unlink(p.marker.c_str());
    if (process_alive(p.child))
        kill(p.child, SIGKILL);
}

} // namespace
