// SPDX-License-Identifier: BSD-2-Clause
// What a test brought up (named namespaces, their veths, pinned maps), taken
// down when the test process is interrupted: Ctrl-C, a CI runner's SIGTERM,
// a closed terminal, or a crash. gtest's TearDown* never runs then, and the
// namespaces and pins would outlive the process, on a machine where other
// tests and users run.
//
// A signal handler may not fork or allocate, so it only writes the signal to
// a pipe. A thread of its own reads it, stops the test's child processes
// (workers, the CLI), runs the registered cleanups, newest first, and then
// lets the signal end the process as it would have (same signal, so shells
// and ctest report it as before). The interrupted test goes on meanwhile,
// except after a crash, where the crashing thread waits in the handler; a
// test that ends meanwhile, or drops a registration, waits for the cleanups
// (they end the process). An alarm (g_backstop_seconds, 30 s) is the
// backstop if a cleanup hangs (a crash inside malloc can deadlock the
// thread's fork). SIGKILL (ctest's timeout) cannot be caught: nothing helps
// there.
//
// Children forked without exec (topo's in-netns helpers) inherit the
// handlers: they take the signal's default action instead.
#pragma once

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <functional>
#include <map>
#include <mutex>
#include <pthread.h>
#include <string>
#include <sys/types.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace incxdp::test {

namespace interrupt_detail {

inline constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
inline constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
// How long the cleanups may take before SIGALRM ends the process anyway
// (a test of the backstop shortens it).
inline unsigned g_backstop_seconds = 30;

// Read by the handler: plain values set before it is installed (a pipe
// means installed).
inline int g_pipe_w = -1;
inline pid_t g_owner = 0;
// The signal being handled, 0 none; lock-free, so the handler may set it.
inline std::atomic<int> g_caught{0};
static_assert(std::atomic<int>::is_always_lock_free);

struct Registry {
    std::mutex mu;
    std::map<uint64_t, std::function<void()>> fns;
    uint64_t next = 1;
};
// Never destroyed: cleanups may run while exit() destroys statics.
inline Registry &registry() {
    static Registry *r = new Registry;
    return *r;
}

inline bool is_crash(int sig) {
    return std::find(std::begin(kCrashSignals), std::end(kCrashSignals), sig) !=
           std::end(kCrashSignals);
}

inline void on_signal(int sig) {
    if (getpid() != g_owner) { // a forked child that has not exec'd
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    const int saved = errno;
    int none = 0;
    if (g_caught.compare_exchange_strong(none, sig)) {
        alarm(g_backstop_seconds);
        const char c = char(sig);
        ssize_t n = write(g_pipe_w, &c, 1);
        (void)n;
    }
    errno = saved;
    // Returning would run the faulting instruction again, or abort() would
    // kill us before the cleanups ran.
    if (is_crash(sig))
        for (;;)
            pause();
}

// What /proc/PID/stat says of a process: "pid (comm) state ppid ...", comm
// possibly holding spaces and parens. False if it is gone.
struct ProcStat {
    std::string comm;
    char state = 0;
    long ppid = 0;
};
inline bool proc_stat(pid_t pid, ProcStat &out) {
    char buf[512];
    int fd = open(("/proc/" + std::to_string(pid) + "/stat").c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return false;
    buf[n] = 0;
    const char *open_paren = strchr(buf, '('), *close_paren = strrchr(buf, ')');
    if (!open_paren || !close_paren ||
        sscanf(close_paren + 1, " %c %ld", &out.state, &out.ppid) != 2)
        return false;
    out.comm.assign(open_paren + 1, close_paren);
    return true;
}

} // namespace interrupt_detail

// Whether pid runs (a zombie does not).
inline bool process_alive(pid_t pid) {
    interrupt_detail::ProcStat st;
    return interrupt_detail::proc_stat(pid, st) && st.state != 'Z';
}

// The running children of `parent`, by /proc; with `comm`, only those so named.
inline std::vector<pid_t> children_of(pid_t parent, const std::string &comm = "") {
    std::vector<pid_t> out;
    DIR *d = opendir("/proc");
    if (!d)
        return out;
    while (dirent *e = readdir(d)) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        const pid_t pid = pid_t(atol(e->d_name));
        interrupt_detail::ProcStat st;
        if (interrupt_detail::proc_stat(pid, st) && st.state != 'Z' && st.ppid == parent &&
            (comm.empty() || st.comm == comm))
            out.push_back(pid);
    }
    closedir(d);
    return out;
}

namespace interrupt_detail {

// Our children SIGTERMed, waited for up to 5 s, then killed: a CLI still
// creating pins could otherwise recreate what the cleanups remove.
inline void stop_children() {
    for (pid_t c : children_of(getpid()))
        kill(c, SIGTERM);
    for (int i = 0; i < 50 && !children_of(getpid()).empty(); i++)
        usleep(100 * 1000);
    for (pid_t c : children_of(getpid()))
        kill(c, SIGKILL);
}

inline void run_on_signal(int pipe_r) {
    char c = 0;
    while (read(pipe_r, &c, 1) != 1)
        if (errno != EINTR)
            return;
    const int sig = g_caught;
    std::fprintf(stderr, "\n[ interrupted by signal %d: taking down what the tests brought up ]\n",
                 sig);
    stop_children();
    {
        // Held to the end: a fixture tearing down meanwhile waits.
        Registry &r = registry();
        std::lock_guard<std::mutex> lock(r.mu);
        for (auto it = r.fns.rbegin(); it != r.fns.rend(); ++it) {
            try {
                it->second();
            } catch (const std::exception &e) {
                std::fprintf(stderr, "[ cleanup after signal %d: %s ]\n", sig, e.what());
            }
        }
    }
    // The signal's own default action, from this thread (which blocks the
    // others' signals): the crashing thread still blocks its own.
    signal(sig, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
    pthread_kill(pthread_self(), sig);
    for (;;)
        pause();
}

// A test whose main() returns while the cleanups run waits for them (they
// end the process).
inline void wait_in_exit() {
    if (g_caught)
        for (;;)
            pause();
}

inline void install() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
        std::perror("interrupt cleanup: pipe2");
        return;
    }
    g_pipe_w = fds[1];
    g_owner = getpid();
    // The thread starts with every signal blocked, so the kernel never picks
    // it for one of ours (a crash in it still kills the process).
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    std::thread(run_on_signal, fds[0]).detach();
    pthread_sigmask(SIG_SETMASK, &old, nullptr);

    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    for (int sig : kStopSignals)
        sigaction(sig, &sa, nullptr);
    for (int sig : kCrashSignals)
        sigaction(sig, &sa, nullptr);
    std::atexit(wait_in_exit);
}

} // namespace interrupt_detail

// Registered while alive: fn runs if the process is interrupted. It runs on
// the cleanup thread while the test's threads go on (or hang): it must not
// wait for them, and reports with stderr, not gtest assertions.
class CleanupOnInterrupt {
  public:
    explicit CleanupOnInterrupt(std::function<void()> fn) {
        auto &r = interrupt_detail::registry();
        std::lock_guard<std::mutex> lock(r.mu);
        if (interrupt_detail::g_pipe_w < 0)
            interrupt_detail::install();
        id_ = r.next++;
        r.fns.emplace(id_, std::move(fn));
    }
    // After a signal the cleanup runs whatever happens: a test that reaches
    // its teardown meanwhile waits here for the process to end.
    ~CleanupOnInterrupt() {
        if (interrupt_detail::g_caught)
            for (;;)
                pause();
        auto &r = interrupt_detail::registry();
        std::lock_guard<std::mutex> lock(r.mu);
        r.fns.erase(id_);
    }
    CleanupOnInterrupt(const CleanupOnInterrupt &) = delete;
    CleanupOnInterrupt &operator=(const CleanupOnInterrupt &) = delete;

  private:
    uint64_t id_ = 0;
};

} // namespace incxdp::test
