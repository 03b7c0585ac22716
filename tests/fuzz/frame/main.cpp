// SPDX-License-Identifier: BSD-2-Clause
// incxdp-frame-fuzz: random and mutated frames through the XDP programs with
// bpf_prog_test_run_opts, checking after every frame that
//   - the verdict is PASS, DROP, TX or REDIRECT;
//   - exactly one ingress verdict counter grew, by one, and it agrees with
//     the verdict (every drop is counted);
//   - a refused frame left every slot byte-identical;
//   - PASS left the frame untouched, TX/REDIRECT outputs are well-formed;
//   - the model (model.h) predicted that counter, verdict, output frame and
//     slot array;
//   - the hosts' incxdp_pass passed it untouched.
// Deterministic for a seed; a violation prints seed, frame index, a hex dump
// and the command that replays it. See docs/FUZZING.md.
#include "engine.h"
#include "gen.h"
#include "model.h"
#include "../../common/kernel_btf.h"

#include <incxdp/ctl.h>
#include <incxdp/proto.h>
#include <incxdp/switchml.h>

#include <linux/bpf.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>

namespace incxdp::fuzz {
namespace {

constexpr int kExitViolation = 1, kExitUsage = 2, kExitSkip = 77;

struct Options {
    uint64_t frames = 200000;
    uint64_t seed = 1;
    bool keep_going = false;
    uint64_t trace_from = UINT64_MAX;
    uint64_t reset_every = 100000;
    uint64_t pass_every = 1;
    bool quiet = false;
    bool percpu_stats = false;
};

void usage(FILE *to) {
    std::fprintf(
        to, "usage: incxdp-frame-fuzz [--frames N] [--seed S] [--keep-going]\n"
            "                         [--trace-from I] [--reset-every N] [--pass-every K]\n"
            "                         [--percpu-stats] [-q]\n"
            "  --frames N       frames to run (default 200000)\n"
            "  --seed S         PRNG seed (default 1); the same seed gives the same frames\n"
            "  --keep-going     report every violation instead of stopping at the first\n"
            "  --trace-from I   print every frame from index I on, with its verdict\n"
            "  --reset-every N  zero one job's pool every N frames (job reset; default 100000)\n"
            "  --pass-every K   also run the hosts' incxdp_pass on every K-th frame (default 1; 0 "
            "= never)\n"
            "  --percpu-stats   keep incxdp_stats per-CPU as built (a batch lookup per frame);\n"
            "                   by default it is a plain mmapped array, twice as fast\n"
            "  -q               no progress lines\n"
            "exit: 0 clean, 1 invariant violated, 2 usage or load error, 77 not root (skipped)\n");
}

bool parse_u64(const char *s, uint64_t &out) {
    char *end = nullptr;
    errno = 0;
    unsigned long long v = std::strtoull(s, &end, 0);
    if (errno || !end || *end || s[0] == '-')
        return false;
    out = v;
    return true;
}

int parse_options(int argc, char **argv, Options &o) {
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        uint64_t *num = a == "--frames"        ? &o.frames
                        : a == "--seed"        ? &o.seed
                        : a == "--trace-from"  ? &o.trace_from
                        : a == "--reset-every" ? &o.reset_every
                        : a == "--pass-every"  ? &o.pass_every
                                               : nullptr;
        if (num) {
            if (i + 1 >= argc || !parse_u64(argv[i + 1], *num)) {
                std::fprintf(stderr, "incxdp-frame-fuzz: %s needs a number\n", a.c_str());
                return kExitUsage;
            }
            i++;
        } else if (a == "--percpu-stats") {
            o.percpu_stats = true;
        } else if (a == "--keep-going") {
            o.keep_going = true;
        } else if (a == "-q" || a == "--quiet") {
            o.quiet = true;
        } else if (a == "-h" || a == "--help") {
            usage(stdout);
            std::exit(0);
        } else {
            std::fprintf(stderr, "incxdp-frame-fuzz: unknown argument '%s'\n", a.c_str());
            usage(stderr);
            return kExitUsage;
        }
    }
    return 0;
}

const char *verdict_name(int v) {
    switch (v) {
    case XDP_ABORTED:
        return "ABORTED";
    case XDP_DROP:
        return "DROP";
    case XDP_PASS:
        return "PASS";
    case XDP_TX:
        return "TX";
    case XDP_REDIRECT:
        return "REDIRECT";
    }
    return "?";
}

const char *stat_name(int s) {
    return s >= 0 && s < INCXDP_STAT_MAX ? ctl::stat_name(incxdp_stat(s)) : "none";
}

void hexdump(const Bytes &b, const char *title) {
    std::printf("  %s (%zu bytes):\n", title, b.size());
    for (size_t i = 0; i < b.size(); i += 16) {
        std::printf("    %04zx ", i);
        for (size_t j = i; j < i + 16 && j < b.size(); j++)
            std::printf(" %02x", b[j]);
        std::printf("\n");
    }
}

// The verdict each ingress counter stands for.
int verdict_of(int stat) {
    switch (stat) {
    case INCXDP_STAT_PASS:
        return XDP_PASS;
    case INCXDP_STAT_COMPLETED:
        return XDP_REDIRECT;
    case INCXDP_STAT_RETX_UNICAST:
        return XDP_TX;
    case INCXDP_STAT_CHAOS: // with no rates set, only a reflection (XDP_TX)
        return XDP_TX;
    default:
        return XDP_DROP;
    }
}

// Counters of frames the engine refused (or passed on): no slot may change.
bool refusing(int stat) {
    return stat != INCXDP_STAT_CONSUMED && stat != INCXDP_STAT_COMPLETED &&
           stat != INCXDP_STAT_RETX_UNICAST;
}

enum SlotState { kIdle, kBusy, kComplete, kStates };
const char *state_name(int s) {
    static const char *n[] = {"idle", "in progress", "complete"};
    return n[s];
}
int state_of(const incxdp_slot_set &s) {
    return s.remaining ? kBusy : s.bitmap ? kComplete : kIdle;
}

struct Tally {
    uint64_t stats[INCXDP_STAT_MAX] = {};
    uint64_t verdicts[5] = {};
    uint64_t kinds[size_t(Kind::Count)] = {};
    // State of the frame's set and of the other set, for frames that reached a slot.
    uint64_t states[kStates][kStates] = {};
    uint64_t shadow_flips = 0; // completions of a set while the other set was complete
    uint64_t pass_runs = 0;
    uint64_t violations = 0;
    uint64_t bytes = 0;
};

class Fuzzer {
  public:
    explicit Fuzzer(const Options &o)
        : o_(o), engine_(o.percpu_stats), model_(test::kernel_has_func("bpf_xdp_pull_data")), rng_(o.seed), traffic_(rng_, model_) {}
    int run();

  private:
    bool check(uint64_t i, Kind kind, const Bytes &f, const Prediction &p, const RunOut &r,
               const Counters &before, const Counters &after);
    void violation(uint64_t i, Kind kind, const Bytes &f, const char *what,
                   const std::string &detail);
    void report(double secs) const;

    Options o_;
    Engine engine_;
    Model model_;
    Rng rng_;
    Traffic traffic_;
    std::vector<incxdp_slot> prev_, cur_;
    Tally t_;
    bool failed_ = false;
    int egress_errno_ = 0;
};

void Fuzzer::violation(uint64_t i, Kind kind, const Bytes &f, const char *what,
                       const std::string &detail) {
    t_.violations++;
    failed_ = true;
    if (t_.violations > 20)
        return;
    std::printf("VIOLATION %s: seed %" PRIu64 ", frame %" PRIu64 " (%s)\n  %s\n", what, o_.seed, i,
                kind_name(kind), detail.c_str());
    hexdump(f, "frame");
    std::printf("  replay: incxdp-frame-fuzz --seed %" PRIu64 " --frames %" PRIu64
                " --trace-from %" PRIu64 " --reset-every %" PRIu64 "\n",
                o_.seed, i + 1, i, o_.reset_every);
}

std::string first_diff(const Bytes &want, const Bytes &got) {
    if (want.size() != got.size())
        return "length " + std::to_string(got.size()) + ", expected " + std::to_string(want.size());
    for (size_t k = 0; k < want.size(); k++)
        if (want[k] != got[k]) {
            char buf[96];
            std::snprintf(buf, sizeof buf, "byte %zu is 0x%02x, expected 0x%02x", k, got[k],
                          want[k]);
            return buf;
        }
    return "equal";
}

std::string slot_diff(const std::vector<incxdp_slot> &want, const std::vector<incxdp_slot> &got) {
    for (size_t s = 0; s < want.size(); s++) {
        if (!std::memcmp(&want[s], &got[s], sizeof(incxdp_slot)))
            continue;
        const auto *a = reinterpret_cast<const uint8_t *>(&want[s]),
                   *b = reinterpret_cast<const uint8_t *>(&got[s]);
        size_t k = 0;
        while (a[k] == b[k])
            k++;
        char buf[160];
        std::snprintf(
            buf, sizeof buf,
            "slot %zu differs at byte %zu of struct incxdp_slot (0x%02x, expected 0x%02x)", s, k,
            b[k], a[k]);
        return buf;
    }
    return "equal";
}

bool Fuzzer::check(uint64_t i, Kind kind, const Bytes &f, const Prediction &p, const RunOut &r,
                   const Counters &before, const Counters &after) {
    const bool was_failed = failed_;
    auto fail = [&](const char *what, const std::string &detail) {
        violation(i, kind, f, what, detail);
    };

    // 1. A verdict the XDP contract knows and the engine means to give.
    if (r.verdict != XDP_PASS && r.verdict != XDP_DROP && r.verdict != XDP_TX &&
        r.verdict != XDP_REDIRECT)
        fail("verdict", "verdict " + std::to_string(r.verdict));

    // 2. Exactly one ingress counter, by exactly one; the others only as allowed.
    int grown = -1;
    uint64_t sum = 0;
    for (int s = 0; s < INCXDP_STAT_INGRESS_VERDICTS; s++) {
        uint64_t d = after[size_t(s)] - before[size_t(s)];
        sum += d;
        if (d)
            grown = s;
    }
    const uint64_t redirect_fail =
        after[INCXDP_STAT_REDIRECT_FAIL] - before[INCXDP_STAT_REDIRECT_FAIL];
    if (sum != 1)
        fail("one counter per frame", "ingress verdict counters grew by " + std::to_string(sum));
    if (after[INCXDP_STAT_EGRESS_TX] != before[INCXDP_STAT_EGRESS_TX] ||
        after[INCXDP_STAT_EGRESS_DROP] != before[INCXDP_STAT_EGRESS_DROP])
        fail("one counter per frame", "an egress counter grew without an egress program run");
    if (after[INCXDP_STAT_PULLED] - before[INCXDP_STAT_PULLED] != (p.pulled ? 1u : 0u))
        fail("pulled", std::string("pulled grew by ") +
                           std::to_string(after[INCXDP_STAT_PULLED] - before[INCXDP_STAT_PULLED]) +
                           ", model expects " + (p.pulled ? "1" : "0"));

    // 3. The counter agrees with the verdict; a refused redirect is a counted drop.
    if (sum == 1) {
        int want = verdict_of(grown);
        bool ok = want == r.verdict && redirect_fail == 0;
        if (grown == INCXDP_STAT_COMPLETED && r.verdict == XDP_DROP && redirect_fail == 1)
            ok = true;
        if (!ok)
            fail("counter matches verdict",
                 std::string("counter ") + stat_name(grown) + " with verdict " +
                     verdict_name(r.verdict) + ", redirect_fail +" + std::to_string(redirect_fail));
    }

    // 4. A refused frame changes no slot (independent of the model).
    if (grown >= 0 && refusing(grown) &&
        std::memcmp(prev_.data(), cur_.data(), cur_.size() * sizeof(incxdp_slot)))
        fail("refused frame changed slots",
             std::string("counter ") + stat_name(grown) + ": " + slot_diff(prev_, cur_));
    for (uint32_t g : {0u, kJobs[0].pool_base + kJobs[0].pool_size, kSlotEntries - 1}) {
        static const incxdp_slot zero{};
        if (std::memcmp(&cur_[g], &zero, sizeof zero))
            fail("guard slot written", "slot " + std::to_string(g) + " lies in no job's pool");
    }

    // 5. Outputs: PASS untouched (but for the chaos hook's retag); TX and
    // REDIRECT are well-formed results, or the chaos hook's reflection.
    Bytes seen;
    const ChaosHook hook = chaos_hook(f, seen);
    if (r.verdict == XDP_PASS && r.out != seen)
        fail("PASS modified the frame", first_diff(seen, r.out));
    if (hook == ChaosHook::Reflect) {
        if (r.verdict != XDP_TX || r.out != seen)
            fail("chaos reflection", std::string("verdict ") + verdict_name(r.verdict) + ", " +
                                         first_diff(seen, r.out));
    } else if (r.verdict == XDP_TX || r.verdict == XDP_REDIRECT) {
        const Bytes &o = r.out;
        bool sml = o.size() >= test::kL4 &&
                   test::get16(o, test::kEth + 20) >= SWITCHML_UDP_PORT_MIN &&
                   test::get16(o, test::kEth + 20) <= SWITCHML_UDP_PORT_MAX;
        if (r.verdict == XDP_REDIRECT)
            sml = test::get16(o, test::kEth + 22) >= SWITCHML_UDP_PORT_MIN &&
                  test::get16(o, test::kEth + 22) <= SWITCHML_UDP_PORT_MAX;
        if (o.size() != f.size())
            fail("result well-formed", "output length " + std::to_string(o.size()) + " != input " +
                                           std::to_string(f.size()));
        else if (r.verdict == XDP_TX && test::ip_checksum(&o[test::kEth]) != 0)
            fail("result well-formed", "unicast result with a bad IPv4 header checksum");
        else if (sml ? (o[test::kL4] >> 4) != 1 : (o[test::kL4 + 1] & 0xf) != INCXDP_MSG_RESULT)
            fail("result well-formed", "result type not set");
        else if (test::get16(o, test::kEth + 24) != test::get16(f, test::kEth + 24) ||
                 test::get16(o, test::kEth + 2) != test::get16(f, test::kEth + 2))
            fail("result well-formed", "IPv4 or UDP length changed");
    }

    // 6. The model: counter, verdict, output, slots.
    if (sum == 1 && grown != p.stat)
        fail("model: counter",
             std::string("engine counted ") + stat_name(grown) + ", model expects " + stat_name(p.stat));
    else if (r.verdict != p.verdict && !(redirect_fail == 1 && p.verdict == XDP_REDIRECT))
        fail("model: verdict", std::string("engine ") + verdict_name(r.verdict) + ", model " +
                                   verdict_name(p.verdict));
    else if (p.check_out && r.verdict != XDP_DROP && r.out != p.out)
        fail("model: output", first_diff(p.out, r.out) + " (slot " + std::to_string(p.slot_index) +
                                  " set " + std::to_string(p.set) + ")");
    if (std::memcmp(model_.slots().data(), cur_.data(), cur_.size() * sizeof(incxdp_slot)))
        fail("model: slots", slot_diff(model_.slots(), cur_));

    if (failed_ && !was_failed && !o_.keep_going)
        return false;
    if (failed_ && o_.keep_going) {
        model_.resync(cur_);
        failed_ = false;
    }
    return true;
}

int Fuzzer::run() {
    egress_errno_ = engine_.probe_egress();
    engine_.read_slots(prev_);
    Counters before = engine_.counters();
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    for (uint64_t i = 0; i < o_.frames; i++) {
        if (i && o_.reset_every && i % o_.reset_every == 0) {
            const JobDef &j = kJobs[rng_.below(uint32_t(kJobs.size()))];
            engine_.reset_pool(j);
            model_.reset_pool(j);
            engine_.read_slots(prev_);
        }
        Kind kind;
        Bytes f = traffic_.next(kind);
        Prediction p = model_.apply(f);
        RunOut r = engine_.run_switch(f);
        Counters after = engine_.counters();
        engine_.read_slots(cur_);

        if (i >= o_.trace_from) {
            int grown = -1;
            for (int s = 0; s < INCXDP_STAT_INGRESS_VERDICTS; s++)
                if (after[size_t(s)] != before[size_t(s)])
                    grown = s;
            std::printf("frame %" PRIu64 " %s, %zu B: %s %s (model: %s %s)\n", i, kind_name(kind),
                        f.size(), stat_name(grown), verdict_name(r.verdict), stat_name(p.stat),
                        verdict_name(p.verdict));
            hexdump(f, "frame");
        }
        if (!check(i, kind, f, p, r, before, after))
            return kExitViolation;

        if (o_.pass_every && i % o_.pass_every == 0) {
            RunOut q = engine_.run_pass(f);
            t_.pass_runs++;
            Bytes seen;
            const int want = chaos_hook(f, seen) == ChaosHook::Reflect ? XDP_TX : XDP_PASS;
            if (q.verdict != want || q.out != seen) {
                violation(i, kind, f, "incxdp_pass",
                          std::string("verdict ") + verdict_name(q.verdict));
                if (!o_.keep_going)
                    return kExitViolation;
            }
        }

        t_.kinds[size_t(kind)]++;
        t_.stats[p.stat]++;
        t_.stats[INCXDP_STAT_PULLED] += p.pulled;
        t_.verdicts[r.verdict >= 0 && r.verdict < 5 ? r.verdict : 0]++;
        t_.bytes += f.size();
        if (!refusing(p.stat) || p.stat == INCXDP_STAT_RETX_DROP || p.stat == INCXDP_STAT_STALE ||
            p.stat == INCXDP_STAT_MISMATCH) {
            const incxdp_slot &s = prev_[p.slot_index];
            t_.states[state_of(s.set[p.set])][state_of(s.set[p.set ^ 1])]++;
            if (p.stat == INCXDP_STAT_COMPLETED && state_of(s.set[p.set ^ 1]) == kComplete)
                t_.shadow_flips++;
        }
        std::swap(prev_, cur_);
        before = after;

        if (!o_.quiet && (i + 1) % 1000000 == 0) {
            auto now = std::chrono::steady_clock::now();
            double dt = std::chrono::duration<double>(now - last).count();
            std::printf("%" PRIu64 " frames, %.0f frames/s\n", i + 1, 1e6 / dt);
            std::fflush(stdout);
            last = now;
        }
    }
    report(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return t_.violations ? kExitViolation : 0;
}

void Fuzzer::report(double secs) const {
    const uint64_t n = o_.frames;
    auto pct = [n](uint64_t x) { return n ? 100.0 * double(x) / double(n) : 0.0; };
    std::printf("\nincxdp-frame-fuzz: %" PRIu64 " frames (seed %" PRIu64
                ") in %.1f s: %.0f frames/s, %.1f MB of frames\n",
                n, o_.seed, secs, secs > 0 ? double(n) / secs : 0.0,
                double(t_.bytes) / 1e6);
    std::printf("incxdp_pass runs: %" PRIu64 "\n", t_.pass_runs);
    if (egress_errno_)
        std::printf(
            "incxdp_egress_rewrite: not run (bpf_prog_test_run: %s; devmap programs are covered by "
            "tests/e2e)\n",
            std::strerror(egress_errno_));
    else
        std::printf(
            "incxdp_egress_rewrite: this kernel can test-run devmap programs: fuzz it too\n");
    std::printf("\ncounters (ingress verdicts):\n");
    for (int s = 0; s < INCXDP_STAT_INGRESS_VERDICTS; s++)
        std::printf("  %-15s %12" PRIu64 "  %5.1f%%\n", stat_name(s), t_.stats[s],
                    pct(t_.stats[s]));
    std::printf("  (of them pulled whole from fragments: %" PRIu64 ")\n", t_.stats[INCXDP_STAT_PULLED]);
    std::printf("verdicts:\n");
    for (int v : {XDP_PASS, XDP_DROP, XDP_TX, XDP_REDIRECT})
        std::printf("  %-15s %12" PRIu64 "  %5.1f%%\n", verdict_name(v), t_.verdicts[v],
                    pct(t_.verdicts[v]));
    std::printf("frame kinds:\n");
    for (size_t k = 0; k < size_t(Kind::Count); k++)
        std::printf("  %-17s %10" PRIu64 "  %5.1f%%\n", kind_name(Kind(k)), t_.kinds[k],
                    pct(t_.kinds[k]));
    std::printf("set state met by frames that reached a slot (this set / other set):\n");
    for (int a = 0; a < kStates; a++)
        for (int b = 0; b < kStates; b++)
            std::printf("  %-11s / %-11s %10" PRIu64 "\n", state_name(a), state_name(b),
                        t_.states[a][b]);
    std::printf("  completions while the other set was complete (shadow flips): %" PRIu64 "\n",
                t_.shadow_flips);
    std::printf("violations: %" PRIu64 "\n", t_.violations);
}

} // namespace
} // namespace incxdp::fuzz

int main(int argc, char **argv) {
    using namespace incxdp::fuzz;
    Options o;
    if (int rc = parse_options(argc, argv, o))
        return rc;
    if (geteuid() != 0) {
        std::printf("incxdp-frame-fuzz: SKIP: loading BPF programs needs root\n");
        return kExitSkip;
    }
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    try {
        Fuzzer fz(o);
        return fz.run();
    } catch (const EngineError &e) {
        std::fprintf(stderr, "incxdp-frame-fuzz: %s\n", e.what());
        return kExitUsage;
    }
}
