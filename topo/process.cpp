// SPDX-License-Identifier: BSD-2-Clause
#include "process.h"

#include "incxdp/netns.h"

#include <incxdp/util/fd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <exception>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <tuple>
#include <unistd.h>
#include <utility>

namespace incxdp::topo::detail {
namespace {

using util::Fd;

struct Pipe {
    Fd rd, wr;
};

Pipe make_pipe(const std::string &what) {
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        throw NetnsError(fmt::format("{}: pipe: {}", what, std::strerror(errno)));
    return {Fd(p[0]), Fd(p[1])};
}

pid_t fork_or_throw(const std::string &what) {
    const pid_t pid = fork();
    if (pid < 0)
        throw NetnsError(fmt::format("{}: fork: {}", what, std::strerror(errno)));
    return pid;
}

int wait_for(pid_t pid) {
    int st = 0;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -1;
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + WTERMSIG(st);
}

// Drains both pipes to EOF; polling both keeps a chatty child from blocking
// on a full stderr pipe while we wait on stdout.
void drain(Fd &a, std::string &out_a, Fd &b, std::string &out_b) {
    char buf[4096];
    while (a.get() >= 0 || b.get() >= 0) {
        pollfd fds[2] = {{a.get(), POLLIN, 0}, {b.get(), POLLIN, 0}};
        if (poll(fds, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        for (auto [fd, out, p] : {std::tuple{&a, &out_a, fds[0]}, std::tuple{&b, &out_b, fds[1]}}) {
            if (fd->get() < 0 || !(p.revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            const ssize_t n = read(fd->get(), buf, sizeof(buf));
            if (n > 0)
                out->append(buf, static_cast<size_t>(n));
            else if (n == 0 || errno != EINTR)
                fd->reset();
        }
    }
}

void write_all(int fd, const std::string &s) {
    size_t off = 0;
    while (off < s.size()) {
        const ssize_t n = write(fd, s.data() + off, s.size() - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        off += static_cast<size_t>(n);
    }
}

[[noreturn]] void exec_child(const std::vector<std::string> &argv) {
    // up() holds back SIGINT & co.; the tool itself should not inherit that.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    std::vector<char *> args;
    for (const auto &a : argv)
        args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    if (argv[0].find('/') == std::string::npos) {
        for (const char *dir : {"/usr/sbin/", "/sbin/"}) {
            const std::string path = dir + argv[0];
            execv(path.c_str(), args.data());
        }
    }
    const std::string msg = fmt::format("cannot run {}: {}\n", argv[0], std::strerror(errno));
    write_all(STDERR_FILENO, msg);
    _exit(127);
}

} // namespace

std::string join_argv(const std::vector<std::string> &argv) {
    std::string s;
    for (const auto &a : argv)
        s += (s.empty() ? "" : " ") + a;
    return s;
}

ProcResult run(const std::vector<std::string> &argv) {
    const std::string what = join_argv(argv);
    Pipe out = make_pipe(what), err = make_pipe(what);
    const pid_t pid = fork_or_throw(what);
    if (pid == 0) {
        dup2(out.wr.get(), STDOUT_FILENO);
        dup2(err.wr.get(), STDERR_FILENO);
        const int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        exec_child(argv);
    }
    out.wr.reset();
    err.wr.reset();
    ProcResult r;
    drain(out.rd, r.out, err.rd, r.err);
    r.status = wait_for(pid);
    return r;
}

std::string run_ok(const std::vector<std::string> &argv, const std::string &what) {
    ProcResult r = run(argv);
    if (r.status == 0)
        return std::move(r.out);
    std::string reason = r.err;
    while (!reason.empty() && (reason.back() == '\n' || reason.back() == ' '))
        reason.pop_back();
    for (auto &c : reason)
        if (c == '\n')
            c = ';';
    if (reason.empty())
        reason = fmt::format("exit status {}", r.status);
    throw NetnsError(fmt::format("{}: `{}` failed: {}", what, join_argv(argv), reason));
}

void in_netns(const std::string &netns, const std::function<void()> &fn, const std::string &what) {
    Pipe msg = make_pipe(what);
    const pid_t pid = fork_or_throw(what);
    if (pid == 0) {
        msg.rd.reset();
        std::string error;
        try {
            const std::string path = "/var/run/netns/" + netns;
            Fd ns(open(path.c_str(), O_RDONLY | O_CLOEXEC));
            if (ns.get() < 0)
                throw NetnsError(fmt::format("open {}: {}", path, std::strerror(errno)));
            if (setns(ns.get(), CLONE_NEWNET) != 0)
                throw NetnsError(fmt::format("setns into {}: {}", netns, std::strerror(errno)));
            fn();
        } catch (const std::exception &e) {
            error = e.what();
        } catch (...) {
            error = "unknown exception";
        }
        write_all(msg.wr.get(), error);
        // _exit: the child must not flush the parent's stdio buffers or run
        // its atexit handlers a second time.
        _exit(error.empty() ? 0 : 1);
    }
    msg.wr.reset();
    std::string error, unused;
    Fd none;
    drain(msg.rd, error, none, unused);
    const int status = wait_for(pid);
    if (status == 0)
        return;
    if (error.empty())
        error = fmt::format("child exited with status {}", status);
    throw NetnsError(fmt::format("{}: {}", what, error));
}

} // namespace incxdp::topo::detail
