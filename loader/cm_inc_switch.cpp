// SPDX-License-Identifier: BSD-2-Clause
#include "cm_inc_switch.h"

#include "cm_counters.h"

#include <incxdp/apply_ctl.h>
#include <incxdp/communicator.h>
#include <incxdp/ctl.h>
#include <incxdp/fattree_plan.h>
#include <incxdp/rules_ctl.h>
#include <incxdp/tree.h>

#include <fmt/format.h>

#include <fcntl.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace incxdp::cm {

bool engines_loaded(const topo::Topology &t, const std::string &prefix,
                    const std::string &pin_root) {
    bool any = false;
    for (const topo::Node &n : t.nodes) {
        if (n.kind == topo::NodeKind::Host)
            continue;
        any = true;
        try {
            if (!ctl::status(topo::switch_pin_dir(pin_root, prefix, n.name)).loaded)
                return false;
        } catch (const std::exception &) {
            return false;
        }
    }
    return any;
}

std::vector<std::string> load_engines(const topo::Topology &t, const std::string &prefix,
                                      const std::string &pin_root) {
    std::vector<std::string> loaded;
    for (const topo::Node &n : t.nodes) {
        if (n.kind == topo::NodeKind::Host)
            continue;
        const std::string dir = topo::switch_pin_dir(pin_root, prefix, n.name);
        try {
            if (ctl::status(dir).loaded)
                continue;
            std::filesystem::create_directories(std::filesystem::path(dir).parent_path());
            ctl::LoadOptions lo;
            lo.pin_dir = dir;
            for (const topo::Iface &i : n.ifaces)
                lo.ifaces.push_back(i.name);
            ctl::rules::in_netns(topo::netns_name(prefix, n.name), [&] { ctl::load(lo); });
        } catch (const std::exception &e) {
            throw std::runtime_error(
                fmt::format("load the engine on switch {} ({}): {}", n.name, dir, e.what()));
        }
        loaded.push_back(n.name);
    }
    return loaded;
}

namespace {

using Clock = std::chrono::steady_clock;

struct Key {
    uint32_t rid, cid;
    bool operator<(const Key &o) const { return std::tie(rid, cid) < std::tie(o.rid, o.cid); }
};

// One (fid, rid, cid): its flows, and the result every member must get.
struct KeyInfo {
    Semantics sem;
    uint64_t size = 0;
    uint32_t agg = UINT32_MAX;
    std::vector<uint32_t> senders;
    std::once_flag once;
    std::string expected; // Aggregate::bytes() of every contribution
};

// The flows one member has in one key, and its result once it came.
struct MemberKey {
    std::vector<size_t> waiting; // released flows, completed with the result
    bool have = false, ok = false;
    double at = -1;
    std::string error;
};

struct Member {
    uint32_t host = 0, rank = 0;
    std::vector<char> released;    // per key; guarded by SwitchIncPath::mu_
    std::atomic<size_t> at_key{0}; // the key its thread works on
    std::vector<MemberKey> keys;   // main thread only
    CommStats stats;               // written by its thread before it ends
    std::thread th;
};

struct FidJob {
    uint32_t fid = 0, job = 0;
    std::vector<std::unique_ptr<KeyInfo>> keys;
    std::vector<uint32_t> hosts; // rank order (host index order)
    std::map<uint32_t, size_t> member_of;
    std::vector<std::unique_ptr<Member>> members;
    topo::AggPlan plan;
    ctl::apply::CompiledJob compiled;
    bool applied = false;
};

struct Posted {
    size_t fid, member, key;
    double at;
    bool ok;
    std::string error;
};

std::string errno_str(int e) {
    return fmt::format("{} ({})", std::strerror(e), e);
}

class SwitchIncPath : public IncPath {
  public:
    SwitchIncPath(const Matrix &m, const topo::Topology &t, const SwitchPathOptions &o);
    ~SwitchIncPath() override;

    const char *kind() const override { return "switch"; }
    void start(Clock::time_point t0) override;
    IncStart release(const Flow &f, size_t idx) override;
    int fd() const override { return efd_; }
    std::vector<IncDone> done() override;
    nlohmann::json finish() override;

  private:
    void group(const Matrix &m);
    void plan_and_apply();
    void run_member(size_t fi, size_t mi);
    void post(Posted p);
    void stop_threads();
    void remove_jobs();
    std::string missing_ranks(const FidJob &fj, size_t ki);
    double now() const { return std::chrono::duration<double>(Clock::now() - t0_).count(); }

    const topo::Topology &t_;
    SwitchPathOptions o_;
    std::vector<FidJob> fids_;
    std::map<size_t, std::pair<size_t, size_t>> loc_; // flow -> (fid, key)
    std::map<size_t, const Flow *> flows_;
    std::vector<std::string> switches_; // every switch of any tree
    std::map<std::string, std::map<std::string, uint64_t>> before_;
    Clock::time_point t0_;
    int efd_ = -1;
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<Posted> posted_; // guarded by mu_
    std::vector<IncDone> ready_; // main thread
    std::atomic<bool> stop_{false};
    bool finished_ = false;
};

SwitchIncPath::SwitchIncPath(const Matrix &m, const topo::Topology &t, const SwitchPathOptions &o)
    : t_(t), o_(o) {
    if (o_.window > o_.slots)
        throw std::runtime_error(fmt::format("window {} > slots {}", o_.window, o_.slots));
    group(m);
    efd_ = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd_ < 0)
        throw std::runtime_error("eventfd: " + errno_str(errno));
    if (o_.load_missing)
        for (const std::string &sw : load_engines(t_, o_.prefix, o_.pin_root))
            if (o_.verbose)
                std::fprintf(stderr, "replay: loaded the engine on %s\n", sw.c_str());
    plan_and_apply();
}

SwitchIncPath::~SwitchIncPath() {
    stop_threads();
    remove_jobs();
    if (efd_ >= 0)
        ::close(efd_);
}

void SwitchIncPath::group(const Matrix &m) {
    const size_t nhosts = std::count_if(t_.nodes.begin(), t_.nodes.end(), [](const auto &n) {
        return n.kind == topo::NodeKind::Host;
    });
    std::map<uint32_t, size_t> fid_idx;
    std::vector<std::map<Key, size_t>> key_idx;
    for (size_t i = 0; i < m.flows.size(); ++i) {
        const Flow &f = m.flows[i];
        if (!f.semantics)
            continue;
        if (std::max(f.src, f.dst) >= nhosts)
            continue; // the replay refuses it before starting
        const Semantics &s = *f.semantics;
        auto [fit, fresh] = fid_idx.try_emplace(s.fid, fids_.size());
        if (fresh) {
            fids_.emplace_back().fid = s.fid;
            key_idx.emplace_back();
        }
        FidJob &fj = fids_[fit->second];
        auto [kit, kfresh] = key_idx[fit->second].try_emplace({s.rid, s.cid}, fj.keys.size());
        if (kfresh) {
            fj.keys.push_back(std::make_unique<KeyInfo>());
            fj.keys.back()->sem = s;
            fj.keys.back()->size = f.size;
        }
        KeyInfo &k = *fj.keys[kit->second];
        const std::string where = fmt::format("flow {} (line {}, fid {} rid {} cid {})", f.id,
                                              f.line, s.fid, s.rid, s.cid);
        if (k.size != f.size || k.sem.op != s.op)
            throw std::runtime_error(where + ": size or agg_op differs from the key's first flow");
        const uint32_t agg = s.dir == AggDir::Up ? f.dst : f.src;
        if (k.agg != UINT32_MAX && k.agg != agg)
            throw std::runtime_error(fmt::format(
                "{}: aggregator host {}, but another flow of the key names {}: one allreduce "
                "per key in the switches",
                where, agg, k.agg));
        k.agg = agg;
        if (s.dir == AggDir::Up)
            k.senders.push_back(f.src);
        loc_[i] = {fit->second, kit->second};
        flows_[i] = &f;
    }
    for (size_t fi = 0; fi < fids_.size(); ++fi) {
        FidJob &fj = fids_[fi];
        std::set<uint32_t> members;
        for (const auto &k : fj.keys) {
            members.insert(k->agg);
            members.insert(k->senders.begin(), k->senders.end());
        }
        fj.hosts.assign(members.begin(), members.end());
        // Keys in (rid, cid) order: every member allreduces them in this order.
        std::vector<std::unique_ptr<KeyInfo>> sorted;
        for (const auto &[key, ki] : key_idx[fi])
            sorted.push_back(std::move(fj.keys[ki]));
        std::map<size_t, size_t> remap;
        size_t n = 0;
        for (const auto &[key, ki] : key_idx[fi])
            remap[ki] = n++;
        fj.keys = std::move(sorted);
        for (auto &[flow, l] : loc_)
            if (l.first == fi)
                l.second = remap.at(l.second);
        for (const auto &k : fj.keys) {
            std::set<uint32_t> c(k->senders.begin(), k->senders.end());
            c.insert(k->agg);
            if (c.size() != members.size() || c.size() != k->senders.size() + 1)
                throw std::runtime_error(fmt::format(
                    "fid {} rid {} cid {}: {} contributors (UP senders and the aggregator) of "
                    "the fid's {}, or a host sending twice: every member of a fid must "
                    "contribute once to every (rid, cid) of it in the switches (--inc host "
                    "aggregates such files at the hosts)",
                    fj.fid, k->sem.rid, k->sem.cid, c.size(), members.size()));
        }
        for (const auto &[i, l] : loc_) {
            const Flow &f = *flows_.at(i);
            if (l.first == fi && f.semantics->dir == AggDir::Down && !members.count(f.dst))
                throw std::runtime_error(fmt::format(
                    "flow {} (line {}): DOWN flow of fid {} to host {}, which contributes "
                    "nothing to it: the switches deliver results to contributors only",
                    f.id, f.line, fj.fid, f.dst));
        }
        if (fj.hosts.size() > 32)
            throw std::runtime_error(
                fmt::format("fid {}: {} hosts; a native tree job has at most 32 workers", fj.fid,
                            fj.hosts.size()));
        for (size_t r = 0; r < fj.hosts.size(); ++r) {
            fj.member_of[fj.hosts[r]] = r;
            auto &mb = fj.members.emplace_back(std::make_unique<Member>());
            mb->host = fj.hosts[r];
            mb->rank = static_cast<uint32_t>(r);
            mb->released.assign(fj.keys.size(), 0);
            mb->keys.resize(fj.keys.size());
        }
    }
    // Job ids: the fid where it fits, else the lowest free one.
    std::set<uint32_t> used;
    for (const FidJob &fj : fids_)
        if (fj.fid < INCXDP_MAX_JOBS)
            used.insert(fj.fid);
    uint32_t next = 0;
    for (FidJob &fj : fids_) {
        if (fj.fid < INCXDP_MAX_JOBS) {
            fj.job = fj.fid;
            continue;
        }
        while (used.count(next))
            ++next;
        if (next >= INCXDP_MAX_JOBS)
            throw std::runtime_error(fmt::format("more than {} fids", INCXDP_MAX_JOBS));
        fj.job = next;
        used.insert(next);
    }
}

void SwitchIncPath::plan_and_apply() {
    std::vector<const topo::Node *> hosts;
    for (const topo::Node &n : t_.nodes)
        if (n.kind == topo::NodeKind::Host)
            hosts.push_back(&n);
    std::vector<topo::AggJob> jobs;
    for (const FidJob &fj : fids_) {
        topo::AggJob j{fj.fid, {}, {}};
        for (uint32_t h : fj.hosts)
            j.contributors.push_back(hosts[h]->name);
        j.receivers = j.contributors;
        jobs.push_back(std::move(j));
    }
    std::vector<topo::AggPlan> plans;
    try {
        plans = topo::plan_agg_jobs(t_, jobs);
    } catch (const std::exception &e) {
        throw std::runtime_error(fmt::format("plan the INC trees: {}", e.what()));
    }
    std::set<std::string> sws;
    for (size_t fi = 0; fi < fids_.size(); ++fi) {
        FidJob &fj = fids_[fi];
        fj.plan = plans[fi];
        ctl::apply::TreeJobSpec spec;
        spec.id = fj.job;
        spec.contributors = jobs[fi].contributors;
        spec.receivers = jobs[fi].receivers;
        spec.worker_port = static_cast<uint16_t>(o_.worker_port_base + fj.job);
        spec.slots = o_.slots;
        try {
            fj.compiled = ctl::apply::compile_tree(t_, spec, fj.plan);
            ctl::apply::apply_tree_netns(t_, o_.prefix, fj.compiled, o_.pin_root);
        } catch (const std::exception &e) {
            remove_jobs();
            throw std::runtime_error(fmt::format("fid {} (job {}, root {}): {}", fj.fid, fj.job,
                                                 fj.plan.root, e.what()));
        }
        fj.applied = true;
        for (const topo::PlanSwitch &s : fj.plan.switches)
            sws.insert(s.name);
        if (o_.verbose)
            std::fprintf(stderr, "replay: fid %u -> job %u, root %s, %zu switches, %zu ranks\n",
                         fj.fid, fj.job, fj.plan.root.c_str(), fj.plan.switches.size(),
                         fj.hosts.size());
    }
    for (const topo::Node &n : t_.nodes)
        if (sws.count(n.name))
            switches_.push_back(n.name);
}

void SwitchIncPath::remove_jobs() {
    for (FidJob &fj : fids_) {
        if (!fj.applied)
            continue;
        try {
            ctl::apply::remove_tree_netns(t_, o_.prefix, fj.compiled, o_.pin_root);
        } catch (const std::exception &e) {
            std::fprintf(stderr, "replay: removing job %u (fid %u) from its switches: %s\n", fj.job,
                         fj.fid, e.what());
        }
        fj.applied = false;
    }
}

void SwitchIncPath::start(Clock::time_point t0) {
    t0_ = t0;
    for (const std::string &sw : switches_)
        before_[sw] = ctl::read_stats(topo::switch_pin_dir(o_.pin_root, o_.prefix, sw));
    for (size_t fi = 0; fi < fids_.size(); ++fi)
        for (size_t mi = 0; mi < fids_[fi].members.size(); ++mi)
            fids_[fi].members[mi]->th = std::thread([this, fi, mi] { run_member(fi, mi); });
}

std::string SwitchIncPath::missing_ranks(const FidJob &fj, size_t ki) {
    std::vector<std::string> out;
    for (const auto &mb : fj.members)
        if (!mb->released[ki] || mb->at_key.load() < ki)
            out.push_back(fmt::format("{} (h{})", mb->rank, mb->host));
    return out.empty() ? "none (contributions or results lost)"
                       : fmt::format("{}", fmt::join(out, ", "));
}

void SwitchIncPath::post(Posted p) {
    {
        std::lock_guard<std::mutex> g(mu_);
        posted_.push_back(std::move(p));
    }
    const uint64_t one = 1;
    (void)!::write(efd_, &one, sizeof one);
}

// One member of one fid, in its own thread (so that its namespace is its
// host's): each key in order, once released, allreduced and checked.
void SwitchIncPath::run_member(size_t fi, size_t mi) {
    FidJob &fj = fids_[fi];
    Member &mb = *fj.members[mi];
    const topo::Node *host = nullptr;
    uint32_t n = 0;
    for (const topo::Node &nd : t_.nodes)
        if (nd.kind == topo::NodeKind::Host && n++ == mb.host)
            host = &nd;
    size_t ki = 0;
    try {
        const std::string ns = "/var/run/netns/" + topo::netns_name(o_.prefix, host->name);
        int nsfd = ::open(ns.c_str(), O_RDONLY | O_CLOEXEC);
        if (nsfd < 0 || ::setns(nsfd, CLONE_NEWNET) != 0)
            throw std::runtime_error("enter " + ns + ": " + errno_str(errno));
        ::close(nsfd);
        CommConfig cfg;
        cfg.rank = mb.rank;
        cfg.world_size = static_cast<uint32_t>(fj.hosts.size());
        cfg.job = fj.job;
        cfg.switch_ip = t_.node(fj.plan.leaf.at(host->name)).ip;
        cfg.local_ip = host->ip;
        cfg.local_port = static_cast<uint16_t>(o_.worker_port_base + fj.job);
        cfg.window = o_.window;
        cfg.mtu = static_cast<uint32_t>(t_.mtu);
        cfg.carrier = Carrier::Socket;
        cfg.deadline = std::chrono::milliseconds(static_cast<int64_t>(o_.deadline_s * 1000));
        cfg.stop = &stop_;
        Communicator comm(cfg);
        for (; ki < fj.keys.size(); ++ki) {
            mb.at_key = ki;
            {
                std::unique_lock<std::mutex> g(mu_);
                cv_.wait(g, [&] { return stop_.load() || mb.released[ki]; });
            }
            if (stop_)
                break;
            KeyInfo &k = *fj.keys[ki];
            const uint64_t elems = k.size / 4;
            std::vector<int32_t> in(elems), out(elems);
            for (uint64_t i = 0; i < elems; ++i)
                in[i] = inc_value(mb.host, k.sem, i);
            // AVG: the switches sum, the host divides (as Aggregate does).
            const ReduceOp op = k.sem.op == AggOp::Max   ? ReduceOp::Max
                                : k.sem.op == AggOp::Min ? ReduceOp::Min
                                                         : ReduceOp::Sum;
            try {
                if (elems)
                    comm.allreduce(std::span<const int32_t>(in), std::span<int32_t>(out), op);
            } catch (const CommTimeout &e) {
                std::string missing;
                {
                    std::lock_guard<std::mutex> g(mu_);
                    missing = missing_ranks(fj, ki);
                }
                throw std::runtime_error(
                    fmt::format("fid {} rid {} cid {}: no result (ranks still missing: {}): {}",
                                fj.fid, k.sem.rid, k.sem.cid, missing, e.what()));
            }
            std::call_once(k.once, [&] {
                Aggregate a(k.agg, k.sem, k.size);
                for (uint32_t s : k.senders)
                    a.add_host(s);
                k.expected = a.bytes();
            });
            std::string got(k.size, '\0');
            const int64_t div = k.sem.op == AggOp::Avg ? int64_t(fj.hosts.size()) : 1;
            for (uint64_t i = 0; i < elems; ++i) {
                const uint32_t u = static_cast<uint32_t>(static_cast<int32_t>(out[i] / div));
                std::memcpy(got.data() + 4 * i, &u, 4);
            }
            Posted p{fi, mi, ki, now(), got == k.expected, ""};
            if (!p.ok) {
                size_t b = 0;
                while (got[b] == k.expected[b])
                    ++b;
                const size_t e = b / 4;
                int32_t want;
                std::memcpy(&want, k.expected.data() + 4 * e, 4);
                p.error = fmt::format("fid {} rid {} cid {} at h{}: element {} is {}, expected {}",
                                      fj.fid, k.sem.rid, k.sem.cid, mb.host, e,
                                      static_cast<int32_t>(out[e] / div), want);
            }
            post(std::move(p));
        }
        mb.stats = comm.total_stats();
    } catch (const std::exception &e) {
        if (stop_)
            return;
        // The communicator is unusable: every key left fails with the reason.
        for (size_t k = ki; k < fj.keys.size(); ++k)
            post({fi, mi, k, now(), false,
                  fmt::format("h{} (rank {} of fid {}): {}", mb.host, mb.rank, fj.fid, e.what())});
    }
}

IncStart SwitchIncPath::release(const Flow &f, size_t idx) {
    const auto [fi, ki] = loc_.at(idx);
    FidJob &fj = fids_[fi];
    const KeyInfo &k = *fj.keys[ki];
    Member &mb = *fj.members[fj.member_of.at(f.semantics->dir == AggDir::Up ? f.src : f.dst)];
    {
        // A sender contributes once its UP flow is released; the aggregator
        // (its own vector) once any flow of the key is.
        std::lock_guard<std::mutex> g(mu_);
        if (f.semantics->dir == AggDir::Up)
            mb.released[ki] = 1;
        fj.members[fj.member_of.at(k.agg)]->released[ki] = 1;
    }
    cv_.notify_all();
    MemberKey &mk = mb.keys[ki];
    if (mk.have) {
        ready_.push_back({idx, -1, mk.ok, mk.error});
        const uint64_t one = 1;
        (void)!::write(efd_, &one, sizeof one);
    } else {
        mk.waiting.push_back(idx);
    }
    return IncStart::Taken;
}

std::vector<IncDone> SwitchIncPath::done() {
    uint64_t v;
    (void)!::read(efd_, &v, sizeof v);
    std::vector<Posted> posted;
    {
        std::lock_guard<std::mutex> g(mu_);
        posted.swap(posted_);
    }
    std::vector<IncDone> out = std::exchange(ready_, {});
    for (Posted &p : posted) {
        MemberKey &mk = fids_[p.fid].members[p.member]->keys[p.key];
        mk.have = true;
        mk.ok = p.ok;
        mk.at = p.at;
        mk.error = p.error;
        for (size_t f : std::exchange(mk.waiting, {}))
            out.push_back({f, p.at, p.ok, p.error});
    }
    return out;
}

void SwitchIncPath::stop_threads() {
    stop_ = true;
    cv_.notify_all();
    for (FidJob &fj : fids_)
        for (auto &mb : fj.members)
            if (mb->th.joinable())
                mb->th.join();
}

nlohmann::json SwitchIncPath::finish() {
    using nlohmann::json;
    if (finished_)
        return nullptr;
    finished_ = true;
    stop_threads();
    json jobs = json::array(), sws = json::array(), tiers = json::object();
    CommStats hosts;
    for (const FidJob &fj : fids_) {
        json tree = json::array();
        for (const topo::PlanSwitch &s : fj.plan.switches)
            tree.push_back({{"name", s.name},
                            {"level", s.level},
                            {"parent", s.parent ? json(*s.parent) : json(nullptr)},
                            {"expected", s.expected}});
        jobs.push_back({{"fid", fj.fid},
                        {"job", fj.job},
                        {"root", fj.plan.root},
                        {"ranks", fj.hosts.size()},
                        {"tree", tree}});
        for (const auto &mb : fj.members)
            hosts += mb->stats;
    }
    for (const std::string &sw : switches_) {
        std::map<std::string, uint64_t> after;
        try {
            after = ctl::read_stats(topo::switch_pin_dir(o_.pin_root, o_.prefix, sw));
        } catch (const std::exception &e) {
            sws.push_back({{"name", sw}, {"error", e.what()}});
            continue;
        }
        json c = json::object();
        const auto &b = before_[sw];
        for (const auto &[name, v] : after) {
            auto it = b.find(name);
            const uint64_t d = v - (it == b.end() ? 0 : std::min(v, it->second));
            if (d && name != "rx" && name != "pass")
                c[name] = d;
        }
        const std::string tier = node_role(t_.node(sw));
        json &tc = tiers[tier];
        if (tc.is_null())
            tc = json::object();
        for (const auto &[name, v] : c.items())
            tc[name] = tc.value(name, uint64_t(0)) + v.get<uint64_t>();
        sws.push_back({{"name", sw}, {"tier", tier}, {"counters", c}});
    }
    remove_jobs();
    return {{"jobs", jobs},
            {"switches", sws},
            {"tiers", tiers},
            {"hosts",
             {{"packets_sent", hosts.packets_sent},
              {"retransmissions", hosts.retransmissions},
              {"timeouts", hosts.timeouts},
              {"duplicates", hosts.duplicates},
              {"stale", hosts.stale}}}};
}

} // namespace

std::unique_ptr<IncPath> make_switch_path(const Matrix &m, const topo::Topology &t,
                                          const SwitchPathOptions &o) {
    return std::make_unique<SwitchIncPath>(m, t, o);
}

} // namespace incxdp::cm
