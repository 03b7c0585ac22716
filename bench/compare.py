#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""incxdp AllReduce against host-based AllReduce (Gloo, OpenMPI) on one
running star topology: the same worker namespaces, the same veths.

Needs the topology up, the engine loaded with its job, and IP forwarding
on the switch (scripts/lib/compare.sh: star_enable_ip_forwarding); shaping,
if any, is star_shape's job: --shape only labels the results. For every
group of sizes (sizes that run the same number of iterations) it runs each
system in turn, one process per rank in each worker's namespace, and prints
a table row per size as soon as every system has done it. Writes
results.json, algbw.png and the ranks' logs to --out. docs/BENCH.md.

  bench/compare.py --prefix ixbench- --topo topo/topologies/star.yaml \\
      --build-dir build [--sizes 4K,1M | --max-size 1G] [--out DIR]
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# name -> (label in table and plot, kind, Gloo algorithm)
SYSTEMS = {
    "incxdp": ("incxdp", "incxdp", None),
    "gloo-ring": ("Gloo ring", "gloo", "ring"),
    "gloo-hd": ("Gloo halving-doubling", "gloo", "halving_doubling"),
    "openmpi": ("OpenMPI", "mpi", None),
    # OpenMPI with an algorithm forced (coll_tuned_allreduce_algorithm).
    "openmpi-ring": ("OpenMPI ring", "mpi", "ring"),
    "openmpi-rabenseifner": ("OpenMPI rabenseifner", "mpi", "rabenseifner"),
    # Further Gloo algorithms, on request (--systems).
    "gloo-ring-chunked": ("Gloo ring-chunked", "gloo", "ring_chunked"),
    "gloo-bcube": ("Gloo bcube", "gloo", "bcube"),
}
DEFAULT_SYSTEMS = "incxdp,gloo-ring,gloo-hd,openmpi"
UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def parse_size(text):
    """4096, 4K, 64M, 1G, 64MiB, 16kB: binary multiples, as incxdp-bench's."""
    t = text.strip().lower()
    t = t[:-2] if t.endswith("ib") else t[:-1] if t.endswith("b") else t
    num = t.rstrip("kmg")
    unit = t[len(num):]
    if not num.isdigit() or unit not in UNITS:
        raise argparse.ArgumentTypeError(f"size '{text}': expected e.g. 4K, 64M, 1G")
    n = int(num) * UNITS[unit]
    if n == 0 or n % 4:
        raise argparse.ArgumentTypeError(f"size '{text}': not a positive multiple of 4 bytes")
    return n


def fmt_size(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def cli_size(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def progress(msg):
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class Topology:
    """The job's ranks: namespace, interface and address of each, read from
    the live namespaces (`incxdp topo status -j`) and the switch's job table
    (`incxdp job list -j`), so rank order is the engine's."""

    def __init__(self, ix, topo, prefix, job):
        status = json.loads(subprocess.check_output([ix, "topo", "status", topo, "--prefix", prefix, "-j"]))
        by_ip = {}
        switch_ns = None
        for node in status["nodes"]:
            if not node["exists"]:
                raise SystemExit(f"compare: namespace {node['netns']} does not exist: is the topology up?")
            for i in node["ifaces"]:
                if node["kind"] == "host" and i["addrs"]:
                    by_ip[i["addrs"][0].split("/")[0]] = (node["netns"], i["name"])
            if node["kind"] == "switch":
                switch_ns = switch_ns or node["netns"]
        self.switch_ns = switch_ns
        jobs = json.loads(subprocess.check_output(nsenter(switch_ns, [ix, "job", "list", "-j"])))
        job_entry = next((j for j in jobs if j["id"] == job), None)
        if job_entry is None:
            raise SystemExit(f"compare: job {job} is not installed on {switch_ns}")
        self.ranks = []  # (netns, iface, ip) by rank
        for r in sorted(job_entry["ranks"], key=lambda r: r["rank"]):
            ns, iface = by_ip[r["ip"]]
            self.ranks.append((ns, iface, r["ip"]))


def nsenter(ns, argv):
    # nsenter, not `ip netns exec`: the latter remounts /sys and hides the
    # bpffs the engine's maps are pinned in.
    return ["nsenter", f"--net=/var/run/netns/{ns}"] + argv


class Runner:
    def __init__(self, args, topo):
        self.a = args
        self.t = topo
        self.logdir = os.path.join(args.out, "logs")
        os.makedirs(self.logdir, exist_ok=True)
        self.bin = {
            "incxdp": os.path.join(args.build_dir, "bench", "incxdp-bench"),
            "gloo": os.path.join(args.build_dir, "bench", "gloo-allreduce"),
            "mpi": os.path.join(args.build_dir, "bench", "mpi-allreduce"),
            "ix": os.path.join(args.build_dir, "loader", "incxdp"),
        }
        self.commands = []  # what was run, for results.json

    def timeout(self, sizes, iters, warmup):
        # A safety net, not a measurement: 2 MB/s would be very slow.
        return 120 + sum(sizes) * (iters + warmup) / 2e6

    def run_ranks(self, name, argvs, timeout):
        """Runs one process per argv to completion; returns rank 0's JSON.
        When one fails, the others get a few seconds and are then stopped:
        a collective whose peer died would otherwise wait for its own
        timeout."""
        procs, logs = [], []
        out_path = os.path.join(self.logdir, f"{name}.rank0.out")
        try:
            for r, argv in enumerate(argvs):
                log = open(os.path.join(self.logdir, f"{name}.rank{r}.log"), "w")
                log.write("$ " + shlex.join(argv) + "\n")
                log.flush()
                logs.append(log)
                out = open(out_path, "w") if r == 0 else log
                if r == 0:
                    logs.append(out)
                procs.append(subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=log,
                                              env=self.env))
            self.commands.append(shlex.join(argvs[0]))
            failed = self.wait_all(procs, timeout)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
            for f in logs:
                f.close()
        result = None
        with open(out_path) as f:
            for line in reversed(f.read().splitlines()):
                if line.startswith("{"):
                    result = json.loads(line)
                    break
        if result is not None and "error" in result:
            failed = f"{failed}: {result['error']}" if failed else result["error"]
        elif failed is None and (result is None or "rows" not in result):
            failed = "no JSON result from rank 0"
        if failed:
            raise RuntimeError(f"{failed}; logs: {self.logdir}/{name}.rank*")
        return result

    @staticmethod
    def wait_all(procs, timeout, grace=5.0):
        """None when all exit 0, else what went wrong."""
        deadline = time.monotonic() + timeout
        first_failure = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                bad = [(r, c) for r, c in enumerate(codes) if c != 0]
                return f"rank(s) exited with {bad}" if bad else None
            now = time.monotonic()
            if first_failure is None and any(c not in (None, 0) for c in codes):
                first_failure = now
            if first_failure is not None and now > first_failure + grace:
                bad = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
                return f"rank(s) exited with {bad}, the others were stopped"
            if now > deadline:
                return f"timed out after {timeout:.0f} s"
            time.sleep(0.1)

    @property
    def env(self):
        e = dict(os.environ)
        e["INCXDP_NETNS_MAP"] = " ".join(f"{ip}={ns}" for ns, _, ip in self.t.ranks)
        return e

    def incxdp(self, tag, sizes, iters, warmup):
        # Slots are clean after a run that closed its communicators; a run
        # that was killed leaves them dirty, so reset before every run.
        subprocess.check_call(nsenter(self.t.switch_ns, [self.bin["ix"], "job", "reset", str(self.a.job)]),
                              stdout=subprocess.DEVNULL)
        argvs = [nsenter(ns, [self.bin["incxdp"], "--topo", self.a.topo, "--job", str(self.a.job),
                              "--rank", str(r), "--dtype", self.a.dtype, "--sizes", ",".join(map(cli_size, sizes)),
                              "--iters", str(iters), "--warmup", str(warmup), "-j"] + self.a.incxdp_args)
                 for r, (ns, _, _) in enumerate(self.t.ranks)]
        return self.run_ranks(tag, argvs, self.timeout(sizes, iters, warmup))

    def gloo(self, tag, algo, sizes, iters, warmup):
        with tempfile.TemporaryDirectory(prefix="incxdp-gloo.") as store:
            argvs = [nsenter(ns, [self.bin["gloo"], "--rank", str(r), "--world", str(len(self.t.ranks)),
                                  "--addr", ip, "--store", store, "--algo", algo, "--dtype", self.a.dtype,
                                  "--sizes", ",".join(map(cli_size, sizes)), "--iters", str(iters),
                                  "--warmup", str(warmup), "-j"])
                     for r, (ns, _, ip) in enumerate(self.t.ranks)]
            return self.run_ranks(tag, argvs, self.timeout(sizes, iters, warmup))

    def mpi(self, tag, algo, sizes, iters, warmup):
        # mpirun runs in rank 0's namespace; it launches an orted in every
        # other worker's namespace through bench/mpi_netns_agent (the
        # hostfile's names are the workers' addresses). Each orted reaches
        # mpirun, and each rank its peers, over eth0 through the switch.
        iface = self.t.ranks[0][1]
        with tempfile.NamedTemporaryFile("w", prefix="incxdp-mpi-hosts.", delete=True) as hf:
            hf.write("".join(f"{ip} slots=1\n" for _, _, ip in self.t.ranks))
            hf.flush()
            argv = nsenter(self.t.ranks[0][0], [
                "mpirun", "--allow-run-as-root", "-np", str(len(self.t.ranks)), "--hostfile", hf.name,
                "--map-by", "node", "--bind-to", "none",
                "--mca", "plm_rsh_agent", os.path.join(HERE, "mpi_netns_agent"),
                "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
                "--mca", "btl_tcp_if_include", iface, "--mca", "oob_tcp_if_include", iface,
                # Each orted believes its node has one slot, so OpenMPI would
                # busy-poll; the four ranks share two cores: yield instead.
                "--mca", "mpi_yield_when_idle", "1",
                *(["--mca", "coll_tuned_use_dynamic_rules", "1",
                   "--mca", "coll_tuned_allreduce_algorithm", algo] if algo else []),
                self.bin["mpi"], "--dtype", self.a.dtype, "--sizes", ",".join(map(cli_size, sizes)),
                "--iters", str(iters), "--warmup", str(warmup), "-j"])
            return self.run_ranks(tag, [argv], self.timeout(sizes, iters, warmup))

    def run(self, system, sizes, iters, warmup):
        _, kind, algo = SYSTEMS[system]
        tag = f"{system}.{cli_size(sizes[0])}-{cli_size(sizes[-1])}"
        # Every rank holds about three buffers of the largest size (input,
        # output or the algorithm's temporary one, receive): refuse rather
        # than have the OOM killer pick a process, maybe someone else's.
        need = 3 * max(sizes) * len(self.t.ranks)
        avail = mem_available()
        if avail is not None and need > avail:
            raise RuntimeError(f"needs about {need >> 20} MiB of memory, {avail >> 20} MiB available")
        if kind == "incxdp":
            return self.incxdp(tag, sizes, iters, warmup)
        if kind == "gloo":
            return self.gloo(tag, algo, sizes, iters, warmup)
        return self.mpi(tag, algo, sizes, iters, warmup)


def mem_available():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def schedule(args):
    """Groups of sizes that share (iterations, warm-up), in size order:
    --iters per size, fewer for large sizes so that a size moves about
    --iter-bytes per system, never fewer than --min-iters."""
    groups = []
    for s in args.sizes:
        iters = max(args.min_iters, min(args.iters, -(-args.iter_bytes // s)))
        warmup = args.warmup if s <= 64 << 20 else min(args.warmup, 1)
        if groups and groups[-1][1:] == (iters, warmup):
            groups[-1][0].append(s)
        else:
            groups.append(([s], iters, warmup))
    return groups


def table_header(systems):
    cols = "".join(f"  {SYSTEMS[s][0][:22]:>22}" for s in systems)
    sub = "".join(f"  {'ms':>10} {'MB/s':>11}" for _ in systems)
    return [f"# {'':>8}{cols}  {'incxdp/best':>12}", f"# {'size':>8}{sub}  {'(best)':>12}"]


def table_row(size, systems, results):
    cells = []
    for s in systems:
        row = results[s]["rows"].get(size)
        cells.append(f"  {row['median_s'] * 1e3:>10.3f} {row['algbw_MBps']:>11.1f}" if row else f"  {'fail':>10} {'':>11}")
    ratio = ratio_for(size, systems, results)
    rtxt = f"{ratio['ratio']:.2f} ({ratio['best']})" if ratio else "-"
    return f"  {fmt_size(size):>8}{''.join(cells)}  {rtxt:>12}"


def ratio_for(size, systems, results):
    """incxdp algbw / the best baseline's algbw (= best baseline time / incxdp time)."""
    mine = results.get("incxdp", {}).get("rows", {}).get(size)
    base = [(results[s]["rows"][size]["algbw_MBps"], s) for s in systems
            if s != "incxdp" and size in results[s]["rows"]]
    if not mine or not base:
        return None
    best_bw, best = max(base)
    return {"size": size, "ratio": mine["algbw_MBps"] / best_bw, "best": best}


def plot(path, systems, results, title):
    try:
        import matplotlib
    except ImportError:
        progress(f"no plot: matplotlib is missing for {sys.executable} (Debian: python3-matplotlib, "
                 "for /usr/bin/python3)")
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for s in systems:
        rows = sorted(results[s]["rows"].items())
        if rows:
            ax.plot([r[0] for r in rows], [r[1]["algbw_MBps"] for r in rows], marker="o",
                    label=SYSTEMS[s][0], linewidth=2.5 if s == "incxdp" else 1.5)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    sizes = sorted({z for s in systems for z in results[s]["rows"]})
    ax.set_xticks(sizes)
    ax.set_xticklabels([fmt_size(z).replace(" ", "") for z in sizes], rotation=45)
    ax.set_xlabel("message size")
    ax.set_ylabel("algbw (MB/s, size / median time)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if sizes:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True


def main():
    # TERM (star_cleanup) unwinds like Ctrl-C, so that run_ranks stops the ranks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prefix", required=True, help="namespace prefix of the running topology")
    p.add_argument("--topo", required=True, help="topology file")
    p.add_argument("--job", type=int, default=1)
    p.add_argument("--build-dir", required=True)
    p.add_argument("--systems", default=DEFAULT_SYSTEMS,
                   help=f"comma-separated, of {','.join(SYSTEMS)} (default {DEFAULT_SYSTEMS})")
    p.add_argument("--sizes", type=lambda s: [parse_size(x) for x in s.split(",")],
                   help="comma-separated sizes; default: powers of 4 from --min-size to --max-size")
    p.add_argument("--min-size", type=parse_size, default=parse_size("4K"))
    p.add_argument("--max-size", type=parse_size, default=parse_size("1G"))
    p.add_argument("--dtype", choices=["int32", "float32"], default="int32")
    p.add_argument("--iters", type=int, default=20, help="timed iterations per size, at most")
    p.add_argument("--min-iters", type=int, default=3)
    p.add_argument("--iter-bytes", type=parse_size, default=parse_size("640M"),
                   help="large sizes run about this many bytes per system (default 640M)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations (1 above 64 MiB)")
    p.add_argument("--shape", default="", help="label of the link shaping in effect (star_shape RATE)")
    p.add_argument("--incxdp-args", default="", help="extra incxdp-bench flags, e.g. '--window 128'")
    p.add_argument("--out", help="output directory (default bench/results/<date>)")
    a = p.parse_args()

    a.systems = [s.strip() for s in a.systems.split(",") if s.strip()]
    for s in a.systems:
        if s not in SYSTEMS:
            p.error(f"--systems: unknown '{s}' (known: {', '.join(SYSTEMS)})")
    if a.sizes is None:
        a.sizes, s = [], a.min_size
        while s <= a.max_size:
            a.sizes.append(s)
            s *= 4
    a.sizes = sorted(set(a.sizes))
    a.incxdp_args = shlex.split(a.incxdp_args)
    if a.shape and any("afxdp" in x for x in a.incxdp_args):
        p.error("--shape with incxdp's AF_XDP transport: AF_XDP frames bypass tc (qdisc and ingress), "
                "so the links would be shaped for the baselines only (docs/BENCH.md)")
    if a.iters < 1 or a.min_iters < 1 or a.min_iters > a.iters:
        p.error("need 1 <= --min-iters <= --iters")
    a.out = os.path.abspath(a.out or os.path.join(HERE, "results", datetime.datetime.now().strftime("%Y%m%d-%H%M%S")))
    os.makedirs(a.out, exist_ok=True)

    topo = Topology(os.path.join(a.build_dir, "loader", "incxdp"), a.topo, a.prefix, a.job)
    runner = Runner(a, topo)
    for kind in {SYSTEMS[s][1] for s in a.systems}:
        path = runner.bin[kind]
        if not os.access(path, os.X_OK):
            raise SystemExit(f"compare: {path} is missing: build it (scripts/setup installs libgloo-dev "
                             "and libopenmpi-dev)")
        if kind == "mpi" and not shutil.which("mpirun"):
            raise SystemExit("compare: mpirun is missing (Debian: openmpi-bin)")

    links = f"links shaped to {a.shape}" if a.shape else "links unshaped"
    title = (f"AllReduce, {len(topo.ranks)} ranks, {a.dtype} sum, star topology, {links}")
    load_before = os.getloadavg()
    results = {s: {"label": SYSTEMS[s][0], "rows": {}, "errors": {}} for s in a.systems}
    groups = schedule(a)
    print(f"# {title}")
    print("# rank 0's median time per call (after a barrier); algbw = size / time, MB/s = 10^6 B/s")
    print(f"# load average {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} on {os.cpu_count()} CPUs")
    for line in table_header(a.systems):
        print(line)
    sys.stdout.flush()
    t_start = time.monotonic()
    for sizes, iters, warmup in groups:
        span = fmt_size(sizes[0]) + (f" .. {fmt_size(sizes[-1])}" if len(sizes) > 1 else "")
        for s in a.systems:
            progress(f"{SYSTEMS[s][0]}: {span}, {warmup} warm-up + {iters} iterations")
            t0 = time.monotonic()
            try:
                res = runner.run(s, sizes, iters, warmup)
                for row in res["rows"]:
                    row.update(iters=iters, warmup=warmup)
                    results[s]["rows"][row["size"]] = row
                progress(f"{SYSTEMS[s][0]}: done in {time.monotonic() - t0:.1f} s")
            except (RuntimeError, subprocess.CalledProcessError) as e:
                for z in sizes:
                    results[s]["errors"][z] = str(e)
                progress(f"{SYSTEMS[s][0]}: FAILED: {e}")
        for z in sizes:
            print(table_row(z, a.systems, results))
        sys.stdout.flush()
    elapsed = time.monotonic() - t_start
    load_after = os.getloadavg()

    doc = {
        "title": title,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "host": {"kernel": platform.release(), "cpus": os.cpu_count(),
                 "loadavg_before": load_before, "loadavg_after": load_after},
        "topology": a.topo, "prefix": a.prefix, "job": a.job, "ranks": [ip for _, _, ip in topo.ranks],
        "shape": a.shape or None, "dtype": a.dtype, "op": "sum",
        "metric": "rank 0's median seconds per AllReduce call after a barrier; algbw_MBps = size / median_s / 1e6",
        "elapsed_s": elapsed,
        "systems": {s: {"label": r["label"], "rows": [r["rows"][z] for z in sorted(r["rows"])],
                        "errors": [{"size": z, "error": e} for z, e in sorted(r["errors"].items())]}
                    for s, r in results.items()},
        "ratio_incxdp_over_best_baseline": [x for x in (ratio_for(z, a.systems, results) for z in a.sizes) if x],
        "commands": runner.commands,
    }
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump(doc, f, indent=1)
    png = os.path.join(a.out, "algbw.png")
    plotted = plot(png, a.systems, results, title)
    print(f"# {elapsed:.0f} s; load average after {load_after[0]:.2f} {load_after[1]:.2f} {load_after[2]:.2f}")
    print(f"# results: {a.out}/results.json" + (f", plot: {png}" if plotted else ""))
    failed = any(r["errors"] for r in results.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
