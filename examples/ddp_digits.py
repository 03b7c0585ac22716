#!/usr/bin/python3
# SPDX-License-Identifier: BSD-2-Clause
"""DDP training of a small MLP on scikit-learn's digits through incxdp.

One command (root): brings topo/topologies/star.yaml up as network
namespaces, loads the XDP switch on its ports, installs job 1, and trains
with 4 ranks, each in its host's namespace, through
init_process_group(backend="incxdp"). Prints progress per epoch and the final
test accuracy; removes everything it created on every exit path.

  examples/ddp_digits.py [--epochs 20 | --steps N] [--compare-gloo] [--transport afxdp]

--compare-gloo trains again with Gloo (same seeds, data split and order) and
exits non-zero if any rank's loss at any step differs by more than the
tolerance (docs/PYTORCH.md: the bound of hostlib's float32 quantisation).
Both runs report their time per step (scripts/bench-ddp).
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
WORLD = 4
# Per-step loss tolerance against Gloo, |a - b| <= ATOL + RTOL * |b|:
# docs/PYTORCH.md "Tolerance" derives it from quantize.h's bound.
RTOL = 1e-4
ATOL = 1e-5


# ---------------------------------------------------------------- one rank

def train_rank(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    from torch.nn.parallel import DistributedDataParallel as DDP

    if args.backend == "incxdp":
        import incxdp_torch  # noqa: F401  registers the backend
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)

    x, y = load_digits(return_X_y=True)
    x_tr, x_te, y_tr, y_te = train_test_split(x / 16.0, y, test_size=0.25, random_state=0,
                                              stratify=y)
    x_tr = torch.tensor(x_tr, dtype=torch.float32)
    y_tr = torch.tensor(y_tr, dtype=torch.int64)
    x_te = torch.tensor(x_te, dtype=torch.float32)
    y_te = torch.tensor(y_te, dtype=torch.int64)

    dist.init_process_group(args.backend, init_method="file://" + args.rdv, rank=args.rank,
                            world_size=WORLD)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 10))
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)

    def accuracy():
        with torch.no_grad():
            return (model(x_te).argmax(1) == y_te).float().mean().item()

    per_rank = args.batch
    losses, times = [], []
    step = 0
    for epoch in range(args.epochs):
        # The same permutation on every rank; rank r takes every WORLD-th sample.
        order = torch.randperm(len(x_tr), generator=torch.Generator().manual_seed(epoch))
        mine = order[args.rank::WORLD]
        for i in range(0, len(mine) - per_rank + 1, per_rank):
            if args.steps and step >= args.steps:
                break
            idx = mine[i:i + per_rank]
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x_tr[idx]), y_tr[idx])
            loss.backward()  # DDP's allreduce of the gradients
            opt.step()
            times.append(time.perf_counter() - t0)
            losses.append(loss.item())
            step += 1
        if args.rank == 0:
            recent = losses[-10:] or [float("nan")]
            print(f"[{args.backend}] epoch {epoch + 1}/{args.epochs} step {step} "
                  f"loss {statistics.mean(recent):.4f} test accuracy {accuracy():.4f}",
                  flush=True)
        if args.steps and step >= args.steps:
            break
    acc = accuracy()
    Path(args.out).write_text(json.dumps({"losses": losses, "times": times, "accuracy": acc}))
    del ddp
    dist.destroy_process_group()


# ---------------------------------------------------------------- driver

def run(cmd, **kw):
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, **kw)


class Star:
    """star.yaml as namespaces <prefix><node>, incxdp on the switch's ports,
    every job installed; down() removes all of it."""

    def __init__(self, topology, cli, mode):
        self.topology, self.cli, self.mode = topology, cli, mode
        tag = f"ddp{os.getpid()}"
        self.prefix = tag + "-"
        self.pins = f"/sys/fs/bpf/incxdp-{tag}"
        self.up_started = False

    def ns(self, node):
        return f"/var/run/netns/{self.prefix}{node}"

    def in_ns(self, node, argv):
        return ["nsenter", f"--net={self.ns(node)}"] + argv

    def up(self, job):
        self.up_started = True
        run([self.cli, "topo", "up", self.topology, "--prefix", self.prefix])
        links = json.loads(run(self.in_ns("sw", ["ip", "-j", "link", "show"])).stdout)
        ports = [l["ifname"] for l in links if l["ifname"] != "lo"]
        load = [self.cli, "load", "--mode", self.mode, "--pin-dir", self.pins]
        for p in ports:
            load += ["--iface", p]
        run(self.in_ns("sw", load))
        run(self.in_ns("sw", [self.cli, "job", "add", "--topo", self.topology, "--job", str(job),
                              "--pin-dir", self.pins]))

    def down(self):
        if not self.up_started:
            return
        self.up_started = False
        for cmd in (self.in_ns("sw", [self.cli, "unload", "--pin-dir", self.pins]),
                    [self.cli, "topo", "down", self.topology, "--prefix", self.prefix]):
            subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.pins, ignore_errors=True)


def launch(args, backend, workdir, star):
    """Runs the 4 ranks of one training run; returns their result dicts."""
    rdv = Path(workdir) / f"rdv-{backend}"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in [str(Path(args.build_dir) / "python"), env.get("PYTHONPATH", "")] if p)
    env["INCXDP_TOPOLOGY"] = str(args.topology)
    env["INCXDP_JOB"] = str(args.job)
    env["INCXDP_TRANSPORT"] = args.transport
    # Gloo runs all ranks in this namespace, over loopback.
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    argvs, outs = [], []
    for r in range(WORLD):
        out = Path(workdir) / f"{backend}-rank{r}.json"
        outs.append(out)
        argv = [sys.executable, str(Path(__file__).resolve()), "--rank", str(r),
                "--backend", backend, "--rdv", str(rdv), "--out", str(out),
                "--epochs", str(args.epochs), "--steps", str(args.steps),
                "--batch", str(args.batch)]
        if backend == "incxdp":
            argv = star.in_ns(f"w{r}", argv)
        argvs.append(argv)
    run_ranks(lambda r: argvs[r], env, args.timeout, f"{backend} training")
    return [json.loads(o.read_text()) for o in outs]


def run_ranks(argv_of, env, timeout, what):
    """Starts argv_of(r) for every rank; raises RuntimeError when one fails
    or they take longer than timeout seconds (the others are killed)."""
    procs = []
    deadline = time.monotonic() + timeout
    try:
        for r in range(WORLD):
            procs.append(subprocess.Popen(argv_of(r), env=env))
        while any(p.poll() is None for p in procs):
            failed = [r for r, p in enumerate(procs) if p.returncode not in (None, 0)]
            if failed or time.monotonic() > deadline:
                why = f"rank {failed[0]} exited with {procs[failed[0]].returncode}" if failed \
                    else f"no result within {timeout} s"
                raise RuntimeError(f"{what} failed: {why}")
            time.sleep(0.1)
        for r, p in enumerate(procs):
            if p.returncode != 0:
                raise RuntimeError(f"{what} failed: rank {r} exited with {p.returncode}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def step_ms(results):
    """Median over steps (after the first, which warms up) of the slowest rank's time."""
    times = [max(ts) for ts in zip(*(r["times"] for r in results))][1:]
    return 1000 * statistics.median(times) if times else float("nan")


def compare(inc, gloo):
    worst, bad = 0.0, None
    for r in range(WORLD):
        a, b = inc[r]["losses"], gloo[r]["losses"]
        if len(a) != len(b):
            return f"rank {r}: {len(a)} steps with incxdp, {len(b)} with gloo", 0.0
        for s, (x, y) in enumerate(zip(a, b)):
            d = abs(x - y)
            worst = max(worst, d)
            if d > ATOL + RTOL * abs(y) and bad is None:
                bad = f"rank {r} step {s}: loss {x:.8f} (incxdp) vs {y:.8f} (gloo)"
    return bad, worst


def interrupt_on_signals():
    """SIGTERM and SIGHUP end a driver as Ctrl-C does: through its finally."""
    def interrupted(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)
    signal.signal(signal.SIGTERM, interrupted)
    signal.signal(signal.SIGHUP, interrupted)


def driver(args):
    if os.geteuid() != 0:
        sys.exit("ddp_digits: needs root (network namespaces, XDP)")
    cli = Path(args.build_dir) / "loader" / "incxdp"
    if not cli.exists() or not (Path(args.build_dir) / "python" / "incxdp_torch").is_dir():
        sys.exit(f"ddp_digits: build the CLI and the backend first: cmake --build "
                 f"{args.build_dir} --target incxdp incxdp_torch")
    star = Star(str(args.topology), str(cli), args.mode)
    workdir = tempfile.mkdtemp(prefix="ddp-digits-")

    interrupt_on_signals()
    try:
        star.up(args.job)
        print(f"ddp_digits: {WORLD} ranks on {args.topology} job {args.job} "
              f"(namespaces {star.prefix}*, transport {args.transport})", flush=True)
        inc = launch(args, "incxdp", workdir, star)
        print(f"ddp_digits: incxdp: {len(inc[0]['losses'])} steps, final test accuracy "
              f"{inc[0]['accuracy']:.4f}, {step_ms(inc):.3f} ms per step", flush=True)
        if not args.compare_gloo:
            return 0
        gloo = launch(args, "gloo", workdir, star)
        print(f"ddp_digits: gloo:   {len(gloo[0]['losses'])} steps, final test accuracy "
              f"{gloo[0]['accuracy']:.4f}, {step_ms(gloo):.3f} ms per step", flush=True)
        bad, worst = compare(inc, gloo)
        if bad:
            print(f"ddp_digits: FAIL: losses differ beyond {RTOL:g} relative + {ATOL:g}: {bad}",
                  flush=True)
            return 1
        print(f"ddp_digits: losses match gloo at every step of every rank (largest "
              f"difference {worst:.3g}, tolerance {ATOL:g} + {RTOL:g} * |loss|)", flush=True)
        return 0
    except KeyboardInterrupt:
        print("ddp_digits: interrupted", file=sys.stderr)
        return 130
    except (RuntimeError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or ""
        print(f"ddp_digits: {e}{': ' + detail.strip() if detail else ''}", file=sys.stderr)
        return 1
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        star.down()
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--steps", type=int, default=0, help="stop after N steps (0: all epochs)")
    p.add_argument("--batch", type=int, default=32, help="samples per rank and step")
    p.add_argument("--compare-gloo", action="store_true")
    p.add_argument("--transport", default="udp", choices=["udp", "afxdp"])
    p.add_argument("--topology", type=Path, default=REPO / "topo" / "topologies" / "star.yaml")
    p.add_argument("--job", type=int, default=1)
    p.add_argument("--mode", default="native", choices=["native", "skb"],
                   help="XDP attach mode of the switch")
    p.add_argument("--build-dir", default=os.environ.get("BUILD_DIR", str(REPO / "build")))
    p.add_argument("--timeout", type=float, default=240, help="seconds per training run")
    # One rank of a run (the driver starts these).
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--rdv", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        train_rank(args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
