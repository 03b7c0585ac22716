// SPDX-License-Identifier: BSD-2-Clause
// incxdp chaos --topo FILE --all-links: the injector on every link of a
// topology, each namespace entered by a forked child.
#include <incxdp/chaos_ctl.h>

#include "pinned_maps.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fcntl.h>
#include <functional>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

namespace incxdp::ctl::chaos {

namespace {

using nlohmann::json;

constexpr Hook kHooks[] = {Hook::Egress, Hook::Ingress};

// Runs fn in a forked child that joined /var/run/netns/<netns>; returns what
// fn returned, or throws its error prefixed with the namespace. A child, so
// that the caller's namespace (and every socket libbpf opens) is untouched.
std::string in_netns(const std::string &netns, const std::function<std::string()> &fn) {
    const std::string path = "/var/run/netns/" + netns;
    if (::access(path.c_str(), F_OK) != 0)
        throw CtlError(fmt::format(
            "namespace {} does not exist (is the topology up with this prefix?)", netns));
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0)
        throw CtlError(errno_msg("pipe", errno));
    Fd rd(p[0]), wr(p[1]);
    std::fflush(nullptr);
    pid_t pid = ::fork();
    if (pid < 0)
        throw CtlError(errno_msg("fork", errno));
    if (pid == 0) {
        rd = Fd();
        std::string msg;
        try {
            Fd ns(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
            if (!ns)
                throw CtlError(errno_msg("no namespace " + netns + " (" + path + ")", errno));
            if (::setns(ns.get(), CLONE_NEWNET) != 0)
                throw CtlError(errno_msg("cannot enter namespace " + netns, errno));
            msg = "0" + fn();
        } catch (const std::exception &e) {
            msg = std::string("1") + e.what();
        }
        for (size_t off = 0; off < msg.size();) {
            ssize_t n = ::write(wr.get(), msg.data() + off, msg.size() - off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            off += static_cast<size_t>(n);
        }
        std::fflush(nullptr);
        _exit(0); // not exit(): the parent's atexit handlers are not ours to run
    }
    wr = Fd();
    std::string msg;
    char buf[4096];
    for (;;) {
        ssize_t n = ::read(rd.get(), buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        msg.append(buf, static_cast<size_t>(n));
    }
    int st = 0;
    while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (msg.empty())
        throw CtlError(fmt::format("{}: helper process died (wait status {})", netns, st));
    if (msg[0] != '0')
        throw CtlError(fmt::format("{}: {}", netns, msg.substr(1)));
    return msg.substr(1);
}

// The plan's hooks grouped by namespace, in plan order: one child each.
std::vector<std::pair<std::string, std::vector<LinkHook>>> by_netns(const LinkPlan &plan) {
    std::vector<std::pair<std::string, std::vector<LinkHook>>> groups;
    for (const auto &h : plan.hooks) {
        auto it = std::find_if(groups.begin(), groups.end(),
                               [&](const auto &g) { return g.first == h.netns; });
        if (it == groups.end()) {
            groups.push_back({h.netns, {}});
            it = groups.end() - 1;
        }
        it->second.push_back(h);
    }
    return groups;
}

std::vector<HookStatus> statuses_from(const std::string &netns, const std::string &text) {
    std::vector<HookStatus> v;
    for (const auto &j : json::parse(text)) {
        v.push_back(hook_status_from_json(j));
        v.back().netns = netns;
    }
    return v;
}

// Each direction at its receiving end: both ends of every link.
LinkPlan all_links_xdp(const topo::Topology &t, const std::string &prefix) {
    LinkPlan plan;
    for (const auto &l : t.links)
        for (const auto &[self, peer] : {std::pair{l.a, l.b}, std::pair{l.b, l.a}}) {
            const topo::Node &n = t.node(self);
            auto it = std::find_if(n.ifaces.begin(), n.ifaces.end(),
                                   [&](const topo::Iface &i) { return i.peer_node == peer; });
            if (it == n.ifaces.end())
                throw CtlError(fmt::format("topology {}: node {} has no interface towards {}",
                                           t.name, n.name, peer));
            plan.hooks.push_back({n.name, topo::netns_name(prefix, n.name), it->name, Hook::Xdp, peer});
        }
    return plan;
}

} // namespace

LinkPlan all_links(const topo::Topology &t, const std::string &prefix, bool xdp) {
    if (xdp)
        return all_links_xdp(t, prefix);
    LinkPlan plan;
    for (const auto &l : t.links) {
        const topo::Node &a = t.node(l.a), &b = t.node(l.b);
        if (a.kind == topo::NodeKind::Switch && b.kind == topo::NodeKind::Switch) {
            plan.unreachable.push_back(l.a + "-" + l.b);
            continue;
        }
        // Every link has a host end (switch-host) or is host-host; a host end
        // carries both directions: egress out, ingress in.
        for (const topo::Node *n : {&a, &b}) {
            if (n->kind != topo::NodeKind::Host)
                continue;
            const std::string &peer = n == &a ? l.b : l.a;
            auto it = std::find_if(n->ifaces.begin(), n->ifaces.end(),
                                   [&](const topo::Iface &i) { return i.peer_node == peer; });
            if (it == n->ifaces.end())
                throw CtlError(fmt::format("topology {}: node {} has no interface towards {}",
                                           t.name, n->name, peer));
            for (Hook h : kHooks) {
                // host-host: each direction once, at the sender's egress.
                if (h == Hook::Ingress && t.node(peer).kind == topo::NodeKind::Host)
                    continue;
                plan.hooks.push_back(
                    {n->name, topo::netns_name(prefix, n->name), it->name, h, peer});
            }
        }
    }
    return plan;
}

std::vector<HookStatus> set_links(const LinkPlan &plan, const RateUpdate &update,
                                  const std::string &root) {
    std::vector<HookStatus> out;
    for (const auto &[netns, hooks] : by_netns(plan)) {
        std::string text = in_netns(netns, [&] {
            json a = json::array();
            for (const auto &h : hooks)
                a.push_back(to_json(set(h.iface, h.hook, update, root)));
            return a.dump();
        });
        for (auto &s : statuses_from(netns, text))
            out.push_back(std::move(s));
    }
    return out;
}

void off_links(const LinkPlan &plan, const std::string &root) {
    std::string errors;
    for (const auto &[netns, hooks] : by_netns(plan)) {
        try {
            in_netns(netns, [&] {
                for (const auto &h : hooks)
                    for (const auto &s : status(h.iface, root)) // attached or pinned
                        if (s.hook == h.hook)
                            off(h.iface, h.hook, root);
                return std::string();
            });
        } catch (const CtlError &e) {
            // Carry on: the other namespaces' hooks should still go.
            errors += (errors.empty() ? "" : "; ") + std::string(e.what());
        }
    }
    if (!errors.empty())
        throw CtlError(errors);
}

std::vector<HookStatus> status_links(const LinkPlan &plan, const std::string &root) {
    std::vector<HookStatus> out;
    for (const auto &[netns, hooks] : by_netns(plan)) {
        std::string text = in_netns(netns, [&] {
            json a = json::array();
            for (const auto &h : hooks)
                a.push_back(to_json(hook_status(h.iface, h.hook, root)));
            return a.dump();
        });
        for (auto &s : statuses_from(netns, text))
            out.push_back(std::move(s));
    }
    return out;
}

} // namespace incxdp::ctl::chaos
