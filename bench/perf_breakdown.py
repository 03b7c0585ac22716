#!/usr/bin/env python3
# Where the CPU goes in a star-topology run: reads `perf script` output of a
# `perf record -a -g` (bench/star_perf.sh --profile) and charges every sample
# of the given commands to one stage of the packet's path, found by walking
# its stack from the leaf outwards to the first frame that names a stage.
#
#   perf script -i perf.data | bench/perf_breakdown.py [--comm incxdp-bench]
#
# On veth everything runs in the sender's context: a sendmmsg runs the
# switch's XDP program, the broadcast and the receivers' softirq before it
# returns, so the stages below are what each host CPU does, not what the
# host "owns". The VM has no PMU: samples are cpu-clock, and time spent with
# interrupts off (the engine's bpf_spin_lock) lands on the unlock.
import argparse
import collections
import os
import re
import sys

# (stage, regex on a frame's symbol); first match from the leaf outwards.
STAGES = [
    ("switch: incxdp_ingress (XDP engine, incl. slot lock)", r"bpf_prog_\w+_incxdp_ingress|__bpf_spin_(un)?lock"),
    ("switch: incxdp_egress_rewrite", r"bpf_prog_\w+_incxdp_egress"),
    ("host: incxdp_pass / incxdp_xsk (steering; live-frame copy)", r"bpf_prog_\w+_(incxdp_pass|incxdp_xsk)"),
    ("AF_XDP live-frame tx (BPF_PROG_RUN, page pool)", r"bpf_prog_test_run|xdp_test_run|bpf_test_run"),
    ("AF_XDP rx (xsk_rcv, copy into umem)", r"^(__)?xsk_rcv|xsk_generic_rcv|__xsk_rcv|xsk_rcv_check|xsk_buff_alloc"),
    ("AF_XDP tx (xsk sendmsg, skb build)", r"xsk_sendmsg|__xsk_sendmsg|xsk_generic_xmit|__xsk_generic_xmit|xsk_build_skb"),
    ("switch: redirect + broadcast (devmap)", r"xdp_do_redirect|dev_map_enqueue|dev_map_redirect_multi|bq_xmit_all|veth_xdp_xmit|xdp_do_flush|__dev_flush|dev_map_bpf_prog_run|xdpf_clone"),
    ("switch: skb -> xdp (veth_xdp_rcv_skb, COW copy)", r"veth_xdp_rcv_skb|veth_convert_skb_to_xdp_buff|skb_pp_cow_data"),
    ("host: xdp_frame -> skb (veth_xdp_rcv_one)", r"veth_xdp_rcv_one|veth_xdp_rcv_bulk_skb|__xdp_build_skb_from_frame|xdp_build_skb_from_frame"),
    ("host: GRO", r"gro_receive|napi_gro|dev_gro_receive|udp_gro|skb_gro"),
    ("host: ip/udp receive, socket enqueue", r"__netif_receive_skb|netif_receive_skb|ip_rcv|ip_list_rcv|ip_sublist_rcv|udp_rcv|__udp4_lib_rcv|udp_queue_rcv|udp_unicast_rcv|ip_local_deliver"),
    ("softirq/napi residue", r"net_rx_action|__napi_poll|veth_poll|handle_softirqs|do_softirq"),
    ("host: recvmmsg (copy to user)", r"udp_recvmsg|__sys_recvmmsg|___sys_recvmsg|do_recvmmsg|sock_recvmsg|inet_recvmsg|__x64_sys_recvfrom|__sys_recvfrom"),
    ("host: sendmmsg (skb alloc, copy, route, ip out)", r"udp_sendmsg|__sys_sendmmsg|___sys_sendmsg|____sys_sendmsg|__x64_sys_sendto|__sys_sendto|udp_send_skb|ip_finish_output|__dev_queue_xmit|veth_xmit"),
    ("wait: poll/schedule/wakeup", r"do_sys_poll|do_ppoll|__x64_sys_ppoll|__x64_sys_poll|schedule|finish_task_switch|try_to_wake_up|__wake_up|ep_poll|sched_yield|__x64_sys_sched_yield"),
    ("syscall entry/other kernel", r"entry_SYSCALL|do_syscall_64|syscall_exit"),
    ("user: pack (Int32Steps::build, store_be32_n)", r"store_be32_n|Int32Steps::build|Float32Steps::build|quantize"),
    ("user: unpack (Int32Steps::consume, load_be32_n)", r"load_be32_n|Int32Steps::consume|Float32Steps::consume|dequantize"),
    ("user: frame build/parse (AF_XDP)", r"afxdp|AfXdp|frame_|Frame"),
    ("user: engine + transport", r"incxdp::"),
]
COMPILED = [(name, re.compile(rx)) for name, rx in STAGES]


REDIRECT = "switch: redirect + broadcast (devmap)"
LIVE_TX = "AF_XDP live-frame tx (BPF_PROG_RUN, page pool)"
NAPI = re.compile(r"veth_poll|__napi_poll|net_rx_action")
TEST_RUN = re.compile(COMPILED[[n for n, _ in COMPILED].index(LIVE_TX)][1].pattern)


def classify(frames):
    for k, (sym, dso) in enumerate(frames):
        for name, rx in COMPILED:
            if rx.search(sym):
                # The redirect/flush functions serve the switch's broadcast
                # (inside a veth NAPI poll) and the hosts' live-frame sends
                # (inside BPF_PROG_RUN): the next enclosing one decides.
                if name == REDIRECT:
                    for outer, _ in frames[k + 1:]:
                        if NAPI.search(outer):
                            break
                        if TEST_RUN.search(outer):
                            return LIVE_TX
                return name
    sym, dso = frames[0] if frames else ("?", "?")
    if "kernel" in dso:
        return "other kernel"
    return "user: other (libc, ...)"


def snapshot(path):
    """Counters of one bench/star_perf.sh snapshot: {key: int}."""
    out, sec = {}, ""
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("## "):
            sec = line[3:]
            continue
        f = line.split()
        if sec == "/proc/stat" and f and f[0] == "cpu":
            for k, v in zip(["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"], f[1:]):
                out["cpu." + k] = int(v)
        elif sec == "/proc/softirqs" and f and f[0] in ("NET_RX:", "NET_TX:", "TIMER:", "SCHED:"):
            out["softirq." + f[0][:-1]] = sum(int(x) for x in f[1:])
        elif sec == "bpf progs":
            m = re.search(r"name (\S+).*run_time_ns (\d+) run_cnt (\d+)", line)
            if m:
                out[f"bpf.{f[0]}.{m.group(1)}.ns"] = int(m.group(2))
                out[f"bpf.{f[0]}.{m.group(1)}.cnt"] = int(m.group(3))
        elif sec.startswith("ethtool") and len(f) == 3 and f[2].isdigit():
            out[f"{sec[8:]}.{f[0]}.{f[1].rstrip(':')}"] = int(f[2])
        elif sec.startswith("nstat") and len(f) >= 2 and f[1].isdigit():
            out[f"{sec[6:]}.{f[0]}"] = int(f[1])
    return out


def summary(d):
    """/proc/stat, bpf_stats, drops and worker times of a profiled run."""
    b, a = snapshot(os.path.join(d, "before")), snapshot(os.path.join(d, "after"))
    delta = {k: a[k] - b.get(k, 0) for k in a}
    hz = os.sysconf("SC_CLK_TCK")
    print("machine /proc/stat (all processes, s): " + ", ".join(
        f"{k[4:]} {delta[k] / hz:.2f}" for k in sorted(delta) if k.startswith("cpu.") and delta[k]))
    progs = collections.defaultdict(lambda: [0, 0])
    for k, v in delta.items():
        if k.startswith("bpf."):
            _, node, name, what = k.split(".")
            progs[(node if node == "sw" else "hosts", name)][what == "cnt"] += v
    for (node, name), (ns, cnt) in sorted(progs.items()):
        if cnt:
            print(f"bpf {node:5} {name:24} {cnt:9d} runs {ns / cnt:7.0f} ns/run  {ns / 1e9:6.3f} s")
    verdicts = sum(v for k, v in delta.items() if k.startswith("sw.") and k.endswith("_xdp_drops"))
    if verdicts:
        # XDP_DROP on the switch ports: the engine consumes every contribution
        # but the one completing a slot; not a loss.
        print(f"switch XDP_DROP verdicts (consumed contributions, by design): {verdicts}")
    lost = [(k, v) for k, v in sorted(delta.items()) if v and not k.startswith("cpu.") and
            re.search(r"drop|Errors|err", k) and not (k.startswith("sw.") and k.endswith("_xdp_drops"))]
    print("drops/errors: " + (", ".join(f"{k} {v}" for k, v in lost) if lost else "none"))
    ticks = []
    for r in range(4):
        try:
            u, s_ = open(os.path.join(d, f"rank{r}.ticks")).read().split()
            ticks.append((int(u) / hz, int(s_) / hz))
        except (OSError, ValueError):
            pass
    if ticks:
        print("workers utime/stime (s): " + ", ".join(f"{u:.2f}/{s_:.2f}" for u, s_ in ticks) +
              f"; sum {sum(u for u, _ in ticks):.2f}/{sum(s_ for _, s_ in ticks):.2f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", help="a run directory of star_perf.sh --profile: print its counters too")
    ap.add_argument("--comm", action="append", help="commands to count (default incxdp-bench, ksoftirqd)")
    ap.add_argument("--top", type=int, default=0, help="also list the top N leaf symbols per stage")
    ap.add_argument("--pids", help="only these worker pids (and ksoftirqd); default: DIR/pids")
    a = ap.parse_args()
    pids = set((a.pids or "").replace(",", " ").split())
    if not pids and a.dir and os.path.exists(os.path.join(a.dir, "pids")):
        pids = set(open(os.path.join(a.dir, "pids")).read().split())
    if a.dir:
        summary(a.dir)
    comms = a.comm or ["incxdp-bench", "ksoftirqd"]
    head = re.compile(r"^(\S.*?)\s+(\d+)(?:/\d+)?\s+\[(\d+)\]")
    frame = re.compile(r"^\s+[0-9a-f]+\s+(.*?)\s+\((.*)\)$")
    counts = collections.Counter()
    leaves = collections.defaultdict(collections.Counter)
    by_comm = collections.Counter()
    total = 0
    cur_comm, cur_pid, frames = None, None, []

    def flush():
        nonlocal total
        # (cur_comm, cur_pid and frames are read from the enclosing scope)
        if cur_comm is None:
            return
        base = cur_comm.split("/")[0]
        if not any(base.startswith(c) for c in comms):
            return
        if pids and base != "ksoftirqd" and cur_pid not in pids:
            return
        total += 1
        by_comm[base] += 1
        st = classify(frames)
        counts[st] += 1
        if frames:
            leaves[st][re.sub(r"\+0x[0-9a-f]+$", "", frames[0][0])] += 1

    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line:
            continue
        m = head.match(line)
        if m and not line.startswith("\t"):
            flush()
            cur_comm, cur_pid, frames = m.group(1).strip(), m.group(2), []
            continue
        f = frame.match(line)
        if f:
            frames.append((re.sub(r"\+0x[0-9a-f]+$", "", f.group(1)), f.group(2)))
    flush()
    if total == 0:
        print("no samples of", comms)
        return
    print(f"{total} samples of {', '.join(comms)}: " +
          ", ".join(f"{c} {n / total:.1%}" for c, n in by_comm.most_common()))
    for st, n in counts.most_common():
        print(f"{n / total:7.1%}  {st}")
        if a.top:
            for sym, k in leaves[st].most_common(a.top):
                print(f"           {k / total:6.1%}  {sym}")


if __name__ == "__main__":
    main()
