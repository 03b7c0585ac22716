// SPDX-License-Identifier: BSD-2-Clause
// up() and down() of netns.h: namespaces and veths through ip(8), the XDP
// attach and sysctls from a child that has joined the namespace.
#include "incxdp/netns.h"
#include "incxdp/fattree_routes.h"
#include "process.h"

#include "incxdp_pass.skel.h"

#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <linux/if_link.h>
#include <net/if.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

namespace incxdp::topo {
namespace {

using detail::in_netns;
using detail::run_ok;

bool netns_exists(const std::string &ns) {
    struct stat st {};
    return stat(("/var/run/netns/" + ns).c_str(), &st) == 0;
}

void require_root(const std::string &what) {
    if (geteuid() != 0)
        throw NetnsError(what + ": needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN)");
}

// Holds back SIGINT, SIGTERM and SIGHUP while alive, so a Ctrl-C lands
// after a rollback has run instead of leaving half a topology behind.
class SignalHold {
  public:
    SignalHold() {
        sigset_t s;
        sigemptyset(&s);
        for (int sig : {SIGINT, SIGTERM, SIGHUP})
            sigaddset(&s, sig);
        sigprocmask(SIG_BLOCK, &s, &old_);
    }
    ~SignalHold() { sigprocmask(SIG_SETMASK, &old_, nullptr); }
    SignalHold(const SignalHold &) = delete;
    SignalHold &operator=(const SignalHold &) = delete;

  private:
    sigset_t old_;
};

// Deletes the namespaces created so far unless commit() is reached.
// Deleting a namespace also destroys its veths (both ends) and their XDP
// programs, so the namespaces are all there is to undo.
class Rollback {
  public:
    void created(const std::string &ns) { created_.push_back(ns); }
    void commit() { created_.clear(); }
    ~Rollback() {
        // Best effort: a destructor must not throw, and the error being
        // unwound is the one worth reporting.
        for (auto it = created_.rbegin(); it != created_.rend(); ++it) {
            try {
                detail::run({"ip", "netns", "del", *it});
            } catch (...) {
            }
        }
    }

  private:
    std::vector<std::string> created_;
};

// No router solicitations, DAD or MLD: the links carry only our frames.
// /proc/sys/net resolves to the namespace of the process that opens it.
void disable_ipv6() {
    for (const char *path : {"/proc/sys/net/ipv6/conf/default/disable_ipv6",
                             "/proc/sys/net/ipv6/conf/all/disable_ipv6"}) {
        std::ofstream f(path);
        if (!f && errno == ENOENT)
            return; // kernel booted with ipv6.disable=1: nothing to quiet
        if (!(f << "1\n") || !f.flush())
            throw NetnsError(fmt::format("write 1 to {}: {}", path, std::strerror(errno)));
    }
}

// A mesh node relays: frames arrive on one link with the source address of
// another link, which reverse-path filtering would drop. Set before the
// veths exist, so they inherit `default` (the kernel uses max(all, iface)).
void disable_rp_filter() {
    for (const char *path :
         {"/proc/sys/net/ipv4/conf/all/rp_filter", "/proc/sys/net/ipv4/conf/default/rp_filter"}) {
        std::ofstream f(path);
        if (!(f << "0\n") || !f.flush())
            throw NetnsError(fmt::format("write 0 to {}: {}", path, std::strerror(errno)));
    }
}

// libbpf warnings, kept so a failed load can say why (child process only).
std::string g_libbpf_log;

int capture_libbpf(enum libbpf_print_level level, const char *fmt, va_list ap) {
    if (level == LIBBPF_DEBUG)
        return 0;
    char buf[512];
    const int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
    g_libbpf_log += buf;
    return n;
}

std::string libbpf_reason(int err) {
    std::string log = g_libbpf_log;
    while (!log.empty() && log.back() == '\n')
        log.pop_back();
    for (auto &c : log)
        if (c == '\n')
            c = ';';
    return log.empty() ? std::strerror(err) : fmt::format("{} ({})", std::strerror(err), log);
}

// Runs inside the host's namespace. A veth only receives frames that its
// peer XDP_REDIRECTs into it when it runs an XDP program itself, so every
// host interface gets incxdp_pass. The attachment holds the program after
// this process exits.
void attach_pass(const Node &host) {
    libbpf_set_print(capture_libbpf);
    std::unique_ptr<incxdp_pass, decltype(&incxdp_pass__destroy)> skel(incxdp_pass__open_and_load(),
                                                                       incxdp_pass__destroy);
    if (!skel)
        throw NetnsError("load XDP program incxdp_pass: " + libbpf_reason(errno));
    const int prog_fd = bpf_program__fd(skel->progs.incxdp_pass);
    for (const Iface &i : host.ifaces) {
        const unsigned ifindex = if_nametoindex(i.name.c_str());
        if (ifindex == 0)
            throw NetnsError(fmt::format("iface '{}': {}", i.name, std::strerror(errno)));
        // UPDATE_IF_NOEXIST: never replace a program someone else attached.
        const int err = bpf_xdp_attach(static_cast<int>(ifindex), prog_fd,
                                       XDP_FLAGS_DRV_MODE | XDP_FLAGS_UPDATE_IF_NOEXIST, nullptr);
        if (err)
            throw NetnsError(
                fmt::format("attach XDP program incxdp_pass on iface '{}' (native mode): {}",
                            i.name, libbpf_reason(-err)));
    }
}

class Bringup {
  public:
    Bringup(const Topology &t, const std::string &prefix, const Progress &progress)
        : t_(t), prefix_(prefix), progress_(progress) {}

    void run() {
        for (const Node &n : t_.nodes)
            create_namespace(n);
        for (const Link &l : t_.links)
            create_link(l);
        for (const Node &n : t_.nodes)
            configure(n);
        if (t_.routing == Routing::UpDown)
            install_updown_routes(t_, prefix_, progress_);
        // Mesh interfaces are left free for the relay (`incxdp mesh run`),
        // which is what redirects into them there.
        for (const Node &n : t_.nodes)
            if (n.kind == NodeKind::Host && !n.ifaces.empty() &&
                t_.kind != TopologyKind::Mesh) {
                step(fmt::format("xdp {}: attach incxdp_pass on {} iface(s)", n.name,
                                 n.ifaces.size()));
                in_netns(
                    ns(n.name), [&] { attach_pass(n); }, ctx(n.name));
            }
        rollback_.commit();
    }

  private:
    std::string ns(const std::string &node) const { return netns_name(prefix_, node); }
    std::string ctx(const std::string &node) const {
        return fmt::format("topology {}: node {} (namespace {})", t_.name, node, ns(node));
    }
    void step(const std::string &what) const {
        if (progress_)
            progress_(what);
    }

    void create_namespace(const Node &n) {
        const std::string name = ns(n.name);
        step("netns " + name);
        run_ok({"ip", "netns", "add", name}, ctx(n.name));
        rollback_.created(name);
        in_netns(name, disable_ipv6, ctx(n.name));
        if (t_.kind == TopologyKind::Mesh)
            in_netns(name, disable_rp_filter, ctx(n.name));
        run_ok({"ip", "-n", name, "link", "set", "dev", "lo", "up"}, ctx(n.name));
    }

    // Both ends are created directly inside their namespaces, so names like
    // eth0 never clash with interfaces of the root namespace.
    void create_link(const Link &l) {
        const Iface &ia = link_end(t_.node(l.a), l.a_iface, l.b);
        const Iface &ib = link_end(t_.node(l.b), l.b_iface, l.a);
        step(fmt::format("link {}:{} <-> {}:{}", l.a, ia.name, l.b, ib.name));
        const std::string mtu = std::to_string(t_.mtu);
        run_ok({"ip",
                "link",
                "add",
                ia.name,
                "address",
                mac_to_string(ia.mac),
                "mtu",
                mtu,
                "netns",
                ns(l.a),
                "type",
                "veth",
                "peer",
                "name",
                ib.name,
                "address",
                mac_to_string(ib.mac),
                "mtu",
                mtu,
                "netns",
                ns(l.b)},
               fmt::format("topology {}: link {} - {}", t_.name, l.a, l.b));
    }

    void configure(const Node &n) {
        const std::string name = ns(n.name);
        for (const Iface &i : n.ifaces)
            run_ok({"ip", "-n", name, "link", "set", "dev", i.name, "up"}, ctx(n.name));
        if (n.kind != NodeKind::Host || n.ifaces.empty())
            return;
        for (const Iface &i : n.ifaces) {
            if (i.ip.empty())
                continue;
            step(fmt::format("addr {} {}/{} on {}", n.name, i.ip, i.prefix_len, i.name));
            run_ok({"ip", "-n", name, "addr", "add", fmt::format("{}/{}", i.ip, i.prefix_len),
                    "dev", i.name},
                   ctx(n.name));
        }
        for (size_t k = 0; k < n.ifaces.size(); ++k) {
            const Iface &i = n.ifaces[k];
            const Node &sw = t_.node(i.peer_node);
            // A mesh peer is a host with an address of its own: ARP finds it.
            if (sw.kind != NodeKind::Switch)
                continue;
            const std::string mac = mac_to_string(iface_to(sw, n.name).mac);
            // The subnet route covers eth0; a switch behind another iface
            // needs its own route so traffic to it leaves that way.
            if (k > 0)
                run_ok({"ip", "-n", name, "route", "replace", sw.ip + "/32", "dev", i.name},
                       ctx(n.name));
            // The switch never answers ARP (it has no address, only XDP),
            // so hosts learn its service address statically.
            step(fmt::format("neigh {}: {} -> {} on {}", n.name, sw.ip, mac, i.name));
            run_ok({"ip", "-n", name, "neigh", "replace", sw.ip, "lladdr", mac, "dev", i.name,
                    "nud", "permanent"},
                   ctx(n.name));
        }
    }

    // A link's end by name: a mesh may join one pair by several links.
    static const Iface &link_end(const Node &n, const std::string &name, const std::string &peer) {
        if (name.empty())
            return iface_to(n, peer);
        for (const Iface &i : n.ifaces)
            if (i.name == name)
                return i;
        throw NetnsError(fmt::format("node {} has no interface {}", n.name, name));
    }

    static const Iface &iface_to(const Node &n, const std::string &peer) {
        for (const Iface &i : n.ifaces)
            if (i.peer_node == peer)
                return i;
        throw NetnsError(fmt::format("node {} has no interface towards {}", n.name, peer));
    }

    const Topology &t_;
    const std::string &prefix_;
    const Progress &progress_;
    Rollback rollback_;
};

} // namespace

void up(const Topology &t, const std::string &prefix, const Progress &progress) {
    std::vector<std::string> present;
    for (const Node &n : t.nodes)
        if (netns_exists(netns_name(prefix, n.name)))
            present.push_back(netns_name(prefix, n.name));
    if (!present.empty())
        throw NetnsError(
            fmt::format("topology {} already up with prefix '{}' ({} {} {}); take "
                        "it down first",
                        t.name, prefix, present.size() == 1 ? "namespace" : "namespaces",
                        detail::join_argv(present), present.size() == 1 ? "exists" : "exist"));
    require_root(fmt::format("topology {}: up", t.name));
    const SignalHold hold;
    Bringup(t, prefix, progress).run();
}

size_t down(const Topology &t, const std::string &prefix) {
    std::vector<std::string> doomed;
    for (const Node &n : t.nodes)
        if (netns_exists(netns_name(prefix, n.name)))
            doomed.push_back(netns_name(prefix, n.name));
    if (doomed.empty())
        return 0;
    require_root(fmt::format("topology {}: down", t.name));
    const SignalHold hold;
    std::vector<std::string> errors;
    for (const auto &ns : doomed) {
        try {
            run_ok({"ip", "netns", "del", ns}, fmt::format("topology {}: down", t.name));
        } catch (const NetnsError &e) {
            errors.push_back(e.what());
        }
    }
    if (!errors.empty()) {
        std::string all;
        for (const auto &e : errors)
            all += (all.empty() ? "" : "; ") + e;
        throw NetnsError(all);
    }
    return doomed.size();
}

} // namespace incxdp::topo
