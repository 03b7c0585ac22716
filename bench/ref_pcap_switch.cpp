// SPDX-License-Identifier: BSD-2-Clause
// ref-pcap-switch: INC_Emulation's user-space switch (a libpcap capture
// thread per port, pcap_inject to send, every packet parsed, aggregated and
// answered one at a time under a per-slot mutex, a retransmission thread
// with a 1 s timeout) re-implemented to speak incxdp's RoCEv2 tree protocol
// (docs/ROCE.md §1-§3), so that incxdp's own hosts (hostlib transport
// `roce`) run unchanged against it. It is the same-machine baseline the XDP
// engine is benchmarked against (docs/BENCH.md): the user-space packet path
// is the reference's; the aggregation semantics are incxdp's
// (ref_pcap_agg.h), not the reference's shared PSN % N array.
//
// Run it inside the switch's namespace instead of the XDP engine, with
// incxdp_pass on the switch's ports (bench/ref_tree.sh does both).
#include "ref_pcap_agg.h"
#include "ref_pcap_tools.h"

#include <incxdp/topology.h>
#include <incxdp/tree.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <pcap/pcap.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace incxdp::refsw {
namespace {

// The reference's retransmission thread: every 50 ms, anything unanswered
// for 1 s is sent again, a batch at a time.
constexpr auto kRetxTimeout = std::chrono::seconds(1);
constexpr auto kRetxInterval = std::chrono::milliseconds(50);
constexpr size_t kRetxBatch = 64;
constexpr int kInjectTries = 4; // a full veth ring refuses a frame (ENOBUFS)

struct Options {
    std::string topo, sw;
    uint32_t job = 1;
    int buffer_mb = 32;
    bool verbose = false;
};

struct Port {
    std::string iface;
    pcap_t *pcap = nullptr;
    std::mutex tx_mu; // pcap_t is not thread safe; several threads send on a port
};

// The switch's packet path: a pcap handle and a capture thread per port.
class PcapSwitch {
  public:
    PcapSwitch(const topo::TreePlan &plan, const Options &o) : opt_(o), agg_(plan, o.sw) {
        for (const std::string &ifc : agg_.ports()) {
            ports_.push_back(std::make_unique<Port>());
            ports_.back()->iface = ifc;
        }
    }

    ~PcapSwitch() {
        for (auto &p : ports_)
            if (p->pcap)
                pcap_close(p->pcap);
    }

    void open() {
        for (auto &p : ports_)
            p->pcap = open_port(p->iface);
    }

    // Until SIGINT/SIGTERM; SIGHUP resets the connections and the slots (a
    // new set of host processes starts from idx 0, as after `incxdp rules apply`).
    void run() {
        sigset_t sigs;
        sigemptyset(&sigs);
        for (int s : {SIGINT, SIGTERM, SIGHUP})
            sigaddset(&sigs, s);
        pthread_sigmask(SIG_BLOCK, &sigs, nullptr); // inherited by the threads
        std::vector<std::thread> threads;
        for (size_t i = 0; i < ports_.size(); ++i)
            threads.emplace_back([this, i] { capture_loop(i); });
        if (!agg_.root())
            threads.emplace_back([this] { retransmit_loop(); });
        std::string names;
        for (auto &p : ports_)
            names += (names.empty() ? "" : " ") + p->iface;
        fmt::print("ref-pcap-switch {}: job {}, {}, {} children, pool {}, ports {}: ready\n",
                   opt_.sw, opt_.job, agg_.root() ? "root" : "below the root", agg_.fanin(),
                   agg_.pool(), names);
        std::fflush(stdout);
        for (;;) {
            // -v: the counters once a second while running.
            const timespec tick{1, 0};
            const int sig = sigtimedwait(&sigs, nullptr, opt_.verbose ? &tick : nullptr);
            if (sig < 0) {
                print_stats();
            } else if (sig == SIGHUP) {
                agg_.reset();
                fmt::print(stderr, "ref-pcap-switch {}: reset\n", opt_.sw);
            } else {
                break;
            }
        }
        stop_ = true;
        for (auto &p : ports_)
            pcap_breakloop(p->pcap);
        for (auto &t : threads)
            t.join();
        print_stats();
    }

  private:
    pcap_t *open_port(const std::string &iface) {
        char err[PCAP_ERRBUF_SIZE] = "";
        pcap_t *p = pcap_create(iface.c_str(), err);
        if (!p)
            throw std::runtime_error(fmt::format("pcap_create {}: {}", iface, err));
        auto fail = [&](const std::string &what) {
            std::string m = fmt::format("{} on '{}': {}", what, iface, pcap_geterr(p));
            pcap_close(p);
            throw std::runtime_error(m);
        };
        pcap_set_snaplen(p, 4096);
        pcap_set_promisc(p, 0);
        pcap_set_timeout(p, 100); // lets the loop see stop_ without traffic
        pcap_set_immediate_mode(p, 1);
        pcap_set_buffer_size(p, opt_.buffer_mb << 20);
        if (pcap_activate(p) < 0)
            fail("pcap_activate");
        // Our own frames leave through the same interface: not ours to take.
        if (pcap_setdirection(p, PCAP_D_IN) != 0)
            fail("pcap_setdirection in");
        bpf_program prog{};
        if (pcap_compile(p, &prog, "udp dst port 4791", 1, PCAP_NETMASK_UNKNOWN) != 0)
            fail("pcap_compile");
        const int sf = pcap_setfilter(p, &prog);
        pcap_freecode(&prog);
        if (sf != 0)
            fail("pcap_setfilter");
        return p;
    }

    struct CaptureCtx {
        PcapSwitch *sw;
        size_t port;
        TxQueue txq;
    };

    // pcap_dispatch's callback: one packet, then what it produced goes out.
    static void on_packet(u_char *user, const pcap_pkthdr *h, const u_char *bytes) {
        auto *ctx = reinterpret_cast<CaptureCtx *>(user);
        ctx->sw->agg_.on_frame(ctx->port, bytes, h->caplen, ctx->txq);
        ctx->sw->flush(ctx->txq);
    }

    void capture_loop(size_t port) {
        CaptureCtx ctx{this, port, {}};
        pcap_t *p = ports_[port]->pcap;
        while (!stop_) {
            const int n = pcap_dispatch(p, -1, on_packet, reinterpret_cast<u_char *>(&ctx));
            if (n == PCAP_ERROR_BREAK)
                break;
            if (n == PCAP_ERROR) {
                fmt::print(stderr, "ref-pcap-switch {}: pcap_dispatch on '{}': {}\n", opt_.sw,
                           ports_[port]->iface, pcap_geterr(p));
                kill(getpid(), SIGTERM); // a switch without this port is no switch: stop
                break;
            }
        }
    }

    void flush(TxQueue &txq) {
        for (size_t i = 0; i < txq.size(); ++i) {
            const TxQueue::Frame &fr = txq[i];
            Port &p = *ports_[fr.port];
            bool ok = false;
            {
                std::lock_guard lk(p.tx_mu);
                for (int t = 0; t < kInjectTries && !ok; ++t) {
                    ok = pcap_inject(p.pcap, fr.buf.data(), fr.len) == static_cast<int>(fr.len);
                    if (!ok)
                        std::this_thread::yield();
                }
            }
            agg_.count(ok ? S_tx : S_tx_fail);
        }
        txq.clear();
    }

    void retransmit_loop() {
        TxQueue txq;
        while (!stop_) {
            std::this_thread::sleep_for(kRetxInterval);
            agg_.retransmit(kRetxTimeout, kRetxBatch, txq);
            flush(txq);
        }
    }

    void print_stats() const {
        fmt::print(stderr, "ref-pcap-switch {}:{}\n", opt_.sw, agg_.stats_line());
    }

    Options opt_;
    Aggregator agg_;
    std::vector<std::unique_ptr<Port>> ports_;
    std::atomic<bool> stop_{false};
};

} // namespace
} // namespace incxdp::refsw

int main(int argc, char **argv) {
    using namespace incxdp;
    refsw::Options o;
    std::string write_path, check_path;
    bool list = false, print_plan = false;
    CLI::App app{"ref-pcap-switch: INC_Emulation's libpcap switch on incxdp's RoCEv2 tree "
                 "protocol (a same-machine baseline; docs/BENCH.md)"};
    app.add_option("--topo", o.topo, "topology file");
    app.add_option("--job", o.job, "roce-tree job id")->capture_default_str();
    app.add_option("--switch", o.sw, "this switch (run inside its namespace)");
    app.add_option("--buffer-mb", o.buffer_mb, "pcap buffer per port, MiB")->capture_default_str();
    app.add_flag("--list", list, "print the job's switches and their ports, one line each");
    app.add_flag("--plan", print_plan, "print the job's tree plan (topo::plan_tree) as JSON");
    app.add_option("--write-frames", write_path, "write sample frames to a pcap file and exit");
    app.add_option("--check-frames", check_path, "parse the frames of a pcap file and exit");
    app.add_flag("-v,--verbose", o.verbose);
    CLI11_PARSE(app, argc, argv);

    if (!write_path.empty())
        return refsw::write_frames(write_path);
    if (!check_path.empty())
        return refsw::check_frames(check_path);
    try {
        if (o.topo.empty())
            throw std::runtime_error("--topo is required");
        const auto t = topo::Topology::load_file(o.topo);
        const auto plan = topo::plan_tree(t, o.job);
        if (print_plan) {
            fmt::print("{}\n", refsw::plan_json(plan).dump(1));
            return 0;
        }
        if (list) {
            for (const auto &s : plan.switches) {
                std::string ports;
                for (size_t c : s.child_conns)
                    ports += " " + plan.conns[c].parent_iface;
                if (s.parent_conn)
                    ports += " " + plan.conns[*s.parent_conn].child_iface;
                fmt::print("{}{}\n", s.name, ports);
            }
            return 0;
        }
        if (o.sw.empty())
            throw std::runtime_error("--switch is required");
        refsw::PcapSwitch sw(plan, o);
        sw.open();
        sw.run();
    } catch (const std::exception &e) {
        fmt::print(stderr, "ref-pcap-switch: {}\n", e.what());
        return 1;
    }
    return 0;
}
