// SPDX-License-Identifier: BSD-2-Clause
// CleanupOnInterrupt (interrupt_cleanup.h) in a real process
// (interrupt_probe.cpp): signalled or crashing, the probe's cleanup runs, its
// child is stopped, and it still dies of its signal; without a registration
// nothing runs; a hanging cleanup meets the backstop; a child forked without
// exec takes the default action.
#include "interrupt_cleanup.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <ostream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace {

using incxdp::test::process_alive;

struct Probe {
    pid_t pid = -1;
    pid_t child = -1;
    std::string marker;
};

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

// The probe's end: the signal that ended it, or -exit status; kHung (and
// killed) if it is still there after 20 s.
constexpr int kHung = -1000;
int end_of(pid_t pid) {
    int st = 0;
    for (int i = 0; i < 2000; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid)
            return WIFSIGNALED(st) ? WTERMSIG(st) : -WEXITSTATUS(st);
        if (r < 0 && errno != EINTR)
            return kHung;
        usleep(10 * 1000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
    return kHung;
}

struct Case {
    const char *mode; // interrupt_probe.cpp
    int send;         // the signal sent to the probe, 0: none (it crashes)
    int dies_of;
    bool cleans_up;
};

void PrintTo(const Case &c, std::ostream *os) {
    *os << c.mode << " " << sigabbrev_np(c.dies_of);
}

class InterruptCleanup : public ::testing::TestWithParam<Case> {
  protected:
    // Whatever a failing case left.
    void TearDown() override {
        if (p_.pid > 0 && process_alive(p_.pid)) {
            kill(p_.pid, SIGKILL);
            waitpid(p_.pid, nullptr, 0);
        }
        if (p_.child > 0 && process_alive(p_.child))
            kill(p_.child, SIGKILL);
        std::filesystem::remove(p_.marker);
    }
    Probe p_;
};

// The probe dies of its signal, its cleanup ran (or, withdrawn, did not),
// and its child was stopped either way.
TEST_P(InterruptCleanup, EndsAsTheSignalWouldWithTheCleanupRunAndTheChildStopped) {
    const Case &c = GetParam();
    p_ = start(c.mode);
    ASSERT_GT(p_.child, 0) << "the probe did not start";
    if (c.send)
        kill(p_.pid, c.send);
    EXPECT_EQ(end_of(p_.pid), c.dies_of) << strsignal(c.dies_of);
    EXPECT_EQ(std::filesystem::exists(p_.marker), !c.cleans_up)
        << (c.cleans_up ? "the cleanup did not run" : "a cleanup no longer registered ran");
    EXPECT_FALSE(process_alive(p_.child)) << "the probe's child " << p_.child << " outlived it";
}

INSTANTIATE_TEST_SUITE_P(
    Cases, InterruptCleanup,
    ::testing::Values(Case{"wait", SIGINT, SIGINT, true}, Case{"wait", SIGTERM, SIGTERM, true},
                      Case{"wait", SIGHUP, SIGHUP, true},
                      // The crashing thread waits in the handler for the cleanups.
                      Case{"segv", 0, SIGSEGV, true}, Case{"abort", 0, SIGABRT, true},
                      // main() returning (gtest's, once the interrupted test
                      // fails fast) must not end the process before them.
                      Case{"return", SIGTERM, SIGTERM, true},
                      Case{"withdrawn", SIGTERM, SIGTERM, false},
                      // A cleanup that hangs: the backstop alarm ends it.
                      Case{"hang", SIGTERM, SIGALRM, true}),
    [](const auto &info) {
        return std::string(info.param.mode) + "_" + sigabbrev_np(info.param.dies_of);
    });

// A child forked without exec inherits the handlers: a signal to it ends it
// alone, with the default action, and runs nothing in the probe.
TEST_F(InterruptCleanup, AForkedChildTakesTheDefaultAction) {
    p_ = start("forked");
    ASSERT_GT(p_.child, 0) << "the probe did not start";
    kill(p_.child, SIGTERM);
    for (int i = 0; i < 500 && process_alive(p_.child); i++)
        usleep(10 * 1000);
    EXPECT_FALSE(process_alive(p_.child)) << "the forked child " << p_.child << " ignored SIGTERM";
    usleep(100 * 1000); // what a wrongly woken cleanup thread would need to act
    EXPECT_TRUE(process_alive(p_.pid)) << "the probe died of its child's signal";
    EXPECT_TRUE(std::filesystem::exists(p_.marker))
        << "the probe ran its cleanup for its child's signal";
    kill(p_.pid, SIGTERM);
    EXPECT_EQ(end_of(p_.pid), SIGTERM);
    EXPECT_FALSE(std::filesystem::exists(p_.marker));
}

} // namespace
