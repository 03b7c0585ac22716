// SPDX-License-Identifier: BSD-2-Clause
// incxdp smi routes | run: SMI clusters on the mesh relay (docs/SMI.md).
// `routes` prints the CK_S/CK_R tables of a cabling and, with --install,
// installs each rank's CK_S as its relay's forwarding table and both tables
// as the maps incxdp_smi_cks/ckr the runtime reads; `run` brings
// the cluster up, installs the routes and starts a program once per rank.
#include "commands.h"
#include "pinned_maps.h"
#include "smi_routes.h"

#include <incxdp/netns.h>
#include <incxdp/relay_ctl.h>
#include <incxdp/rules_ctl.h>
#include <incxdp/smi_topology.h>
#include <incxdp/util/ipv4.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <linux/if_link.h>
#include <net/if.h>
#include <nlohmann/json.hpp>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <thread>

namespace incxdp::cli {
namespace {

namespace tsmi = topo::smi;
using nlohmann::json;

struct SmiArgs {
    CommonFlags flags;
    std::string file;
    std::string prefix = "smi-";
    int rank = -1;
    bool apply = false;
    std::string mode = "native";
    bool keep = false;
    double timeout = 0;
    std::vector<std::string> program;
};

struct Cluster {
    tsmi::Cabling cabling;
    topo::Topology topo;
    smi::Routes routes;
};

Cluster load(const std::string &file) {
    try {
        Cluster c;
        c.cabling = tsmi::load_cabling(file);
        c.topo = tsmi::to_topology(c.cabling, tsmi::topology_name(file));
        c.routes = smi::compute_routes(c.cabling);
        return c;
    } catch (const topo::TopologyError &e) {
        throw Error(e.what());
    }
}

std::string pin_dir(const std::string &prefix, const std::string &host) {
    return "/sys/fs/bpf/incxdp/smi-" + prefix + host;
}

const topo::Iface &iface(const topo::Topology &t, const std::string &host,
                         const std::string &name) {
    for (const topo::Iface &i : t.node(host).ifaces)
        if (i.name == name)
            return i;
    throw Error(fmt::format("{} has no interface {}", host, name));
}

uint32_t ip_be(const std::string &ip) {
    if (const auto be = util::parse_ipv4_be(ip))
        return *be;
    throw Error("bad IPv4 address " + ip);
}

// The rank's CK_S and CK_R, whole arrays: a re-cabled cluster's tables
// replace the old ones entry for entry.
void install_ck_tables(const Cluster &c, int rank, const std::string &dir) {
    auto write_all = [&](const char *name, const void *vals, size_t val_size, size_t n) {
        const std::string path = dir + "/" + name;
        ctl::Fd fd(bpf_obj_get(path.c_str()));
        if (fd.get() < 0)
            throw Error(fmt::format("cannot open {} (a relay of an older incxdp? detach it): {}",
                                    path, std::strerror(errno)));
        std::vector<uint32_t> keys(n);
        for (size_t i = 0; i < n; i++)
            keys[i] = static_cast<uint32_t>(i);
        LIBBPF_OPTS(bpf_map_batch_opts, opts);
        uint32_t count = static_cast<uint32_t>(n);
        if (bpf_map_update_batch(fd.get(), keys.data(), vals, &count, &opts) == 0 && count == n)
            return;
        for (size_t i = 0; i < n; i++) // kernels without batch updates of arrays
            if (bpf_map_update_elem(fd.get(), &keys[i],
                                    static_cast<const char *>(vals) + i * val_size, BPF_ANY) != 0)
                throw Error(
                    fmt::format("cannot write entry {} of {}: {}", i, path, std::strerror(errno)));
    };
    const auto cks = smi::cks_map_entries(c.routes, rank);
    const auto ckr = smi::ckr_map_entries();
    write_all(INCXDP_MAP_SMI_CKS, cks.data(), sizeof cks[0], cks.size());
    write_all(INCXDP_MAP_SMI_CKR, ckr.data(), sizeof ckr[0], ckr.size());
}

// In the rank's namespace: the relay on every cabled QSFP, this rank as its
// node id, and one route per reachable rank (stale ones removed, so a
// re-cabled cluster needs only this).
void apply_rank(const Cluster &c, int rank, const std::string &prefix, const std::string &mode) {
    const std::string host = tsmi::host_name(c.cabling.fpgas[rank]);
    const std::string dir = pin_dir(prefix, host);
    ctl::rules::in_netns(topo::netns_name(prefix, host), [&] {
        std::vector<std::string> ifaces;
        for (const topo::Iface &i : c.topo.node(host).ifaces)
            ifaces.push_back(i.name);
        if (!relay::present(dir) && !ifaces.empty())
            relay::attach(dir, ifaces, mode);
        if (ifaces.empty())
            return;
        relay::RelayMaps maps = relay::RelayMaps::open(dir);
        relay::RelayConfig cfg;
        cfg.self_node = static_cast<uint32_t>(rank);
        cfg.relay_enabled = true;
        cfg.max_hops = static_cast<uint32_t>(c.cabling.size());
        maps.set_config(cfg);
        install_ck_tables(c, rank, dir);
        const smi::RankRoutes &rr = c.routes.ranks[rank];
        for (int d = 0; d < c.cabling.size(); d++) {
            if (d == rank || rr.out_ch[d] < 0) {
                maps.del_route(static_cast<uint32_t>(d));
                continue;
            }
            const std::string ch = tsmi::iface_name(rr.out_ch[d]);
            const topo::Iface &mine = iface(c.topo, host, ch);
            const topo::Iface &theirs = iface(c.topo, mine.peer_node, mine.peer_iface);
            incxdp_relay_route r{};
            r.hops = static_cast<uint32_t>(rr.hops[d]);
            r.nnexthops = 1;
            incxdp_relay_nexthop &nh = r.nh[0];
            nh.ifindex = if_nametoindex(ch.c_str());
            if (nh.ifindex == 0)
                throw Error(
                    fmt::format("{}: interface {} not found: {}", host, ch, std::strerror(errno)));
            std::memcpy(nh.src_mac, mine.mac.data(), 6);
            std::memcpy(nh.dst_mac, theirs.mac.data(), 6);
            nh.src_ip = ip_be(mine.ip);
            nh.dst_ip = ip_be(theirs.ip);
            maps.set_route(static_cast<uint32_t>(d), r);
        }
    });
}

void apply_all(const Cluster &c, const std::string &prefix, const std::string &mode) {
    for (int r = 0; r < c.cabling.size(); r++)
        apply_rank(c, r, prefix, mode);
}

void detach_all(const Cluster &c, const std::string &prefix) {
    for (int r = 0; r < c.cabling.size(); r++) {
        const std::string host = tsmi::host_name(c.cabling.fpgas[r]);
        const std::string ns = topo::netns_name(prefix, host);
        if (access(("/var/run/netns/" + ns).c_str(), F_OK) != 0)
            continue;
        try {
            ctl::rules::in_netns(ns, [&] { relay::detach(pin_dir(prefix, host)); });
        } catch (const std::exception &e) {
            std::fprintf(stderr, "incxdp smi: %s: detaching the relay: %s\n", ns.c_str(), e.what());
        }
    }
}

void do_routes(const SmiArgs &a) {
    set_library_verbosity(a.flags.verbose);
    Cluster c = load(a.file);
    if (a.rank >= c.cabling.size())
        throw Error(
            fmt::format("--rank {}: {} has ranks 0..{}", a.rank, a.file, c.cabling.size() - 1));
    if (a.apply)
        apply_all(c, a.prefix, a.mode);
    if (a.flags.json)
        std::cout << smi::routes_json(c.cabling, c.routes, a.rank).dump(2) << "\n";
    else
        std::cout << smi::routes_text(c.cabling, c.routes, a.rank)
                  << (a.apply ? fmt::format("installed in the relays of prefix '{}'\n", a.prefix)
                              : "");
}

volatile sig_atomic_t g_signal = 0;

void on_signal(int sig) {
    g_signal = sig;
}

// The start barrier: each rank writes one byte to `ready` once its endpoint
// is bound (SMI_Init), then waits for EOF on `go`, which the launcher gives
// when every rank is ready: no frame reaches a rank before its sockets are.
struct StartBarrier {
    int ready[2] = {-1, -1}, go[2] = {-1, -1};
    size_t readied = 0;
    StartBarrier() {
        if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0)
            throw Error(fmt::format("start barrier pipes: {}", std::strerror(errno)));
        ::fcntl(ready[0], F_SETFL, O_NONBLOCK);
    }
    ~StartBarrier() {
        for (int fd : {ready[0], ready[1], go[0], go[1]})
            if (fd >= 0)
                ::close(fd);
    }
    void close_end(int &fd) {
        if (fd >= 0)
            ::close(fd);
        fd = -1;
    }
    // After the last spawn: the launcher keeps only ready's read end and go's write end.
    void spawned() {
        close_end(ready[1]);
        close_end(go[0]);
    }
    // Non-blocking: counts the ranks ready so far; releases them all at n.
    void poll(size_t n) {
        char buf[256];
        ssize_t got;
        while (ready[0] >= 0 && (got = ::read(ready[0], buf, sizeof buf)) > 0)
            readied += static_cast<size_t>(got);
        if (readied >= n)
            close_end(go[1]);
    }
};
StartBarrier *g_barrier = nullptr;

// Starts `program` in the rank's namespace with the SMI environment.
pid_t spawn(const Cluster &c, int rank, const SmiArgs &a, const std::string &topo_path) {
    const std::string host = tsmi::host_name(c.cabling.fpgas[rank]);
    const std::string ns = "/var/run/netns/" + topo::netns_name(a.prefix, host);
    int nsfd = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    if (nsfd < 0)
        throw Error(fmt::format("cannot open {}: {}", ns, std::strerror(errno)));
    pid_t pid = ::fork();
    if (pid < 0) {
        ::close(nsfd);
        throw Error(fmt::format("fork: {}", std::strerror(errno)));
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        if (::setns(nsfd, CLONE_NEWNET) != 0) {
            std::fprintf(stderr, "incxdp smi: rank %d: setns %s: %s\n", rank, ns.c_str(),
                         std::strerror(errno));
            _exit(127);
        }
        setenv("INCXDP_SMI_RANK", std::to_string(rank).c_str(), 1);
        setenv("INCXDP_SMI_SIZE", std::to_string(c.cabling.size()).c_str(), 1);
        setenv("INCXDP_SMI_TOPOLOGY", topo_path.c_str(), 1);
        setenv("INCXDP_SMI_PREFIX", a.prefix.c_str(), 1);
        setenv("INCXDP_SMI_PIN_DIR", pin_dir(a.prefix, host).c_str(), 1);
        if (g_barrier) {
            // The child's ends survive exec; the launcher's do not.
            int w = ::dup(g_barrier->ready[1]), r = ::dup(g_barrier->go[0]);
            setenv("INCXDP_SMI_READY_FD", std::to_string(w).c_str(), 1);
            setenv("INCXDP_SMI_GO_FD", std::to_string(r).c_str(), 1);
        }
        std::vector<char *> argv;
        for (const std::string &s : a.program)
            argv.push_back(const_cast<char *>(s.c_str()));
        argv.push_back(nullptr);
        execvp(argv[0], argv.data());
        std::fprintf(stderr, "incxdp smi: rank %d: cannot run %s: %s\n", rank, argv[0],
                     std::strerror(errno));
        _exit(127);
    }
    ::close(nsfd);
    return pid;
}

std::string status_str(int st) {
    if (WIFEXITED(st))
        return fmt::format("exit {}", WEXITSTATUS(st));
    if (WIFSIGNALED(st))
        return fmt::format("killed by signal {} ({})", WTERMSIG(st), strsignal(WTERMSIG(st)));
    return "unknown status";
}

// Waits for every rank; once one fails (or the timeout passes, or a signal
// comes) the others get a few seconds before they are killed.
std::vector<int> wait_ranks(std::vector<pid_t> &pids, double timeout,
                            std::vector<std::string> &why) {
    using Clock = std::chrono::steady_clock;
    constexpr auto kGrace = std::chrono::seconds(5);
    const auto start = Clock::now();
    std::vector<int> status(pids.size(), -1);
    std::vector<bool> done(pids.size(), false);
    why.assign(pids.size(), "");
    size_t left = pids.size();
    std::optional<Clock::time_point> kill_at;
    while (left) {
        if (g_barrier)
            g_barrier->poll(pids.size());
        for (size_t i = 0; i < pids.size(); i++) {
            if (done[i])
                continue;
            int st = 0;
            if (::waitpid(pids[i], &st, WNOHANG) == pids[i]) {
                done[i] = true;
                status[i] = st;
                left--;
                if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && !kill_at)
                    kill_at = Clock::now() + kGrace;
            }
        }
        const auto now = Clock::now();
        if (!kill_at && timeout > 0 && now - start > std::chrono::duration<double>(timeout)) {
            kill_at = now;
            for (size_t i = 0; i < pids.size(); i++)
                if (!done[i])
                    why[i] = fmt::format("still running after --timeout {} s", timeout);
        }
        if (!kill_at && g_signal)
            kill_at = now;
        if (kill_at && now >= *kill_at)
            for (size_t i = 0; i < pids.size(); i++)
                if (!done[i]) {
                    if (why[i].empty())
                        why[i] = g_signal ? "stopped by a signal to incxdp"
                                          : "stopped after another rank failed";
                    ::kill(pids[i], SIGKILL);
                }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status;
}

int do_run(const SmiArgs &a) {
    set_library_verbosity(a.flags.verbose);
    if (a.program.empty())
        throw Error("smi run: no program (incxdp smi run TOPOLOGY -- PROGRAM ARGS...)");
    Cluster c = load(a.file);
    char real[PATH_MAX];
    if (!::realpath(a.file.c_str(), real))
        throw Error(fmt::format("{}: {}", a.file, std::strerror(errno)));
    const std::string topo_path = real;
    const topo::TopologyStatus st = topo::status(c.topo, a.prefix);
    bool brought_up = false;
    if (st.state() == "down") {
        topo::up(c.topo, a.prefix);
        brought_up = true;
    } else if (st.state() != "up") {
        throw Error(fmt::format(
            "cluster {} with prefix '{}' is partly up: take it down first (incxdp topo down "
            "{} --prefix {})",
            a.file, a.prefix, a.file, a.prefix));
    }
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGHUP, &sa, nullptr);
    auto teardown = [&] {
        if (a.keep || !brought_up)
            return;
        detach_all(c, a.prefix);
        topo::down(c.topo, a.prefix);
    };
    std::vector<pid_t> pids;
    std::vector<int> status;
    std::vector<std::string> why;
    StartBarrier barrier;
    g_barrier = &barrier;
    try {
        apply_all(c, a.prefix, a.mode);
        for (int r = 0; r < c.cabling.size(); r++)
            pids.push_back(spawn(c, r, a, topo_path));
        barrier.spawned();
        status = wait_ranks(pids, a.timeout, why);
        g_barrier = nullptr;
    } catch (...) {
        g_barrier = nullptr;
        for (pid_t p : pids)
            ::kill(p, SIGKILL);
        for (pid_t p : pids)
            ::waitpid(p, nullptr, 0);
        teardown();
        throw;
    }
    teardown();
    json out = json::array();
    std::vector<std::string> failed;
    for (size_t r = 0; r < status.size(); r++) {
        const bool ok = WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0;
        std::string s = status_str(status[r]) + (why[r].empty() ? "" : " (" + why[r] + ")");
        out.push_back({{"rank", r}, {"fpga", c.cabling.fpgas[r]}, {"ok", ok}, {"status", s}});
        if (!ok)
            failed.push_back(fmt::format("rank {} ({}): {}", r, c.cabling.fpgas[r], s));
    }
    if (a.flags.json)
        std::cout << json{{"ranks", out}, {"ok", failed.empty()}}.dump(2) << "\n";
    if (!failed.empty()) {
        std::string msg =
            fmt::format("smi run: {} of {} ranks failed:", failed.size(), status.size());
        for (const std::string &f : failed)
            msg += "\n  " + f;
        throw Error(msg);
    }
    if (!a.flags.json)
        std::cout << fmt::format("smi run: all {} ranks exited 0\n", status.size());
    return 0;
}

} // namespace

void add_smi_command(CLI::App &app) {
    CLI::App *smi =
        app.add_subcommand("smi", "SMI (Streaming Message Interface) clusters on the mesh relay");
    smi->require_subcommand(1);
    auto args = std::make_shared<SmiArgs>();

    CLI::App *routes =
        smi->add_subcommand("routes", "print the CK_S/CK_R tables of an SMI cabling file");
    add_common_flags(routes, args->flags);
    routes->add_option("file", args->file, "SMI cabling (JSON or `A - B` lines)")->required();
    routes->add_option("--rank", args->rank, "only this rank");
    routes->add_flag("--apply,--install", args->apply,
                     "install each rank's tables: the relay's routes and the CK_S/CK_R maps "
                     "(cluster up with --prefix)");
    routes->add_option("--prefix", args->prefix, "namespace prefix of the cluster")
        ->capture_default_str();
    routes->add_option("--mode", args->mode, "relay attach mode")
        ->check(CLI::IsMember({"native", "skb"}));
    routes->callback([args] { do_routes(*args); });

    CLI::App *run = smi->add_subcommand("run", "run a program once per rank of an SMI cluster");
    add_common_flags(run, args->flags);
    run->add_option("file", args->file, "SMI cabling (JSON or `A - B` lines)")->required();
    run->add_option("--prefix", args->prefix, "namespace prefix of the cluster")
        ->capture_default_str();
    run->add_flag("--keep", args->keep, "leave the cluster up afterwards");
    run->add_option("--mode", args->mode, "relay attach mode")
        ->check(CLI::IsMember({"native", "skb"}));
    run->add_option("--timeout", args->timeout,
                    "kill every rank after this many seconds (0: none)");
    run->add_option("program", args->program, "PROGRAM ARGS... (after --)")->required();
    run->callback([args] {
        int rc = do_run(*args);
        if (rc)
            std::exit(rc);
    });
}

} // namespace incxdp::cli
