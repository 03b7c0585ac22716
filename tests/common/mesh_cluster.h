// SPDX-License-Identifier: BSD-2-Clause
// A mesh topology brought up for a test suite: `incxdp topo up` under a
// pid-unique prefix, one `incxdp mesh run` daemon per host with its own pin
// directory and log, and everything removed again by take_down() or on
// SIGINT/SIGTERM. Shared by the mesh, p2p and NCCL plugin netns tests.
// Needs root, INCXDP_CLI and INCXDP_SOURCE_DIR.
#pragma once

#include "interrupt_cleanup.h"
#include "process.h"

#include <incxdp/netns.h>
#include <incxdp/topology.h>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace incxdp::test {

class MeshCluster {
  public:
    using Clock = std::chrono::steady_clock;

    topo::Topology t;
    std::string file, tag, prefix, pin_root;
    std::vector<std::string> hosts; ///< file order
    std::string error;              ///< set when bring_up() failed

    MeshCluster() = default;
    MeshCluster(const MeshCluster &) = delete;
    MeshCluster &operator=(const MeshCluster &) = delete;
    ~MeshCluster() { take_down(); }

    std::string ns(const std::string &n) const { return topo::netns_name(prefix, n); }
    std::string pin(const std::string &n) const { return pin_root + "/" + n; }
    std::string log(const std::string &n) const { return "/tmp/" + tag + "-" + n + ".log"; }

    /// argv run inside node n's namespace (nsenter keeps bpffs visible).
    std::vector<std::string> in(const std::string &n, std::vector<std::string> argv) const {
        argv.insert(argv.begin(), {"nsenter", "--net=/var/run/netns/" + ns(n)});
        return argv;
    }

    /// Brings up topo/topologies/<name>.yaml with a prefix from tag_base and
    /// the pid, starts a daemon on every host (with daemon_args) and, if
    /// converge, waits up to 30 s until every host has a route to every
    /// other. Failures land in `error`; take_down() is still safe.
    void bring_up(const std::string &name, const std::string &tag_base,
                  std::vector<std::string> daemon_args = {}, bool converge = true) {
        file = std::string(INCXDP_SOURCE_DIR) + "/topo/topologies/" + name + ".yaml";
        t = topo::Topology::load_file(file);
        tag = tag_base + std::to_string(getpid());
        prefix = tag + "-";
        pin_root = "/sys/fs/bpf/incxdp-" + tag;
        daemon_args_ = std::move(daemon_args);
        for (const auto &n : t.nodes)
            if (n.kind == topo::NodeKind::Host)
                hosts.push_back(n.name);
        up_ = true;
        on_interrupt_.emplace([this] { take_down(); });
        auto r = topo::detail::run({INCXDP_CLI, "topo", "up", file, "--prefix", prefix});
        if (r.status != 0) {
            error = "incxdp topo up: " + r.err;
            return;
        }
        for (const auto &h : hosts)
            start_daemon(h);
        if (converge && !converged(Clock::now() + std::chrono::seconds(30)))
            error = "the mesh daemons did not converge: " + show(hosts[0]).dump();
    }

    /// Daemons stopped; namespaces, pins, state files and logs gone.
    void take_down() {
        if (!up_)
            return;
        up_ = false;
        stop_daemons();
        topo::detail::run({INCXDP_CLI, "topo", "down", file, "--prefix", prefix});
        topo::detail::run({"rm", "-rf", pin_root, "/run/incxdp/mesh" + pin_root});
        for (const auto &h : hosts)
            unlink(log(h).c_str());
    }

    /// `incxdp mesh run` in n's namespace, output appended to log(n).
    void start_daemon(const std::string &n, const std::vector<std::string> &extra = {}) {
        auto argv = in(n, {INCXDP_CLI, "mesh", "run", "--pin-dir", pin(n)});
        argv.insert(argv.end(), daemon_args_.begin(), daemon_args_.end());
        argv.insert(argv.end(), extra.begin(), extra.end());
        const std::string lp = log(n);
        const pid_t pid = fork();
        if (pid == 0) {
            const int fd = open(lp.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            if (fd >= 0) {
                dup2(fd, 1);
                dup2(fd, 2);
            }
            std::vector<char *> args;
            for (auto &a : argv)
                args.push_back(const_cast<char *>(a.c_str()));
            args.push_back(nullptr);
            execvp(args[0], args.data());
            _exit(127);
        }
        if (pid > 0)
            daemons_[n] = pid;
    }

    /// Stops n's daemon with sig, SIGKILL after 5 s.
    void stop_daemon(const std::string &n, int sig = SIGTERM) {
        auto it = daemons_.find(n);
        if (it == daemons_.end())
            return;
        reap(it->second, sig);
        daemons_.erase(it);
    }

    void stop_daemons() {
        for (auto &[n, pid] : daemons_)
            kill(pid, SIGTERM);
        for (auto &[n, pid] : daemons_)
            reap(pid, SIGTERM);
        daemons_.clear();
    }

    std::string daemon_log(const std::string &n) const {
        return topo::detail::run({"cat", log(n)}).out;
    }

    /// `incxdp mesh show -j` on n; null if it failed.
    nlohmann::json show(const std::string &n) const {
        auto r = topo::detail::run(in(n, {INCXDP_CLI, "mesh", "show", "-j", "--pin-dir", pin(n)}));
        try {
            return r.status == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
        } catch (const nlohmann::json::exception &) {
            return nlohmann::json();
        }
    }

    /// Every host has a route to every other.
    bool converged(Clock::time_point deadline) const {
        while (Clock::now() < deadline) {
            bool all = true;
            for (const auto &h : hosts) {
                const auto s = show(h);
                if (!s.contains("routes") || s["routes"].size() != hosts.size() - 1) {
                    all = false;
                    break;
                }
            }
            if (all)
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
        }
        return false;
    }

    /// node's interface towards peer; "" if none.
    std::string iface_to(const std::string &node, const std::string &peer) const {
        for (const auto &i : t.node(node).ifaces)
            if (i.peer_node == peer)
                return i.name;
        return "";
    }

  private:
    static void reap(pid_t pid, int sig) {
        kill(pid, sig);
        for (int i = 0; i < 50; i++) {
            if (waitpid(pid, nullptr, WNOHANG) == pid)
                return;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
    }

    bool up_ = false;
    std::vector<std::string> daemon_args_;
    std::map<std::string, pid_t> daemons_;
    std::optional<CleanupOnInterrupt> on_interrupt_;
};

} // namespace incxdp::test
