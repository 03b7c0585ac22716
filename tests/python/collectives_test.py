#!/usr/bin/python3
# SPDX-License-Identifier: BSD-2-Clause
"""Every collective of the "incxdp" torch.distributed backend, every type,
with 4 ranks on star.yaml (root): values checked against what each rank can
compute from every rank's seeded data, and the unsupported types and ops
refused with errors naming them. Exits non-zero on the first failure.

  tests/python/collectives_test.py --build-dir BUILD
"""
import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import ddp_digits  # noqa: E402  the star bring-up and the rank launcher

WORLD = ddp_digits.WORLD


def data(rank, n, dtype):
    import torch
    g = torch.Generator().manual_seed(1000 + rank)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, (n,), generator=g, dtype=torch.int32)
    return torch.randn(n, generator=g).to(dtype)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def close(got, want, dtype, what):
    import torch
    if dtype == torch.int32:
        check(torch.equal(got, want.to(torch.int32)), f"{what}: not bit-exact")
        return
    # float32: quantize.h's bound is n^2 * M * 2^-29 per element, M the
    # largest |x| of the packet's block; half types add their own rounding.
    eps = {torch.float32: 2.0 ** -22, torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7}[dtype]
    m = want.abs().max().item()
    err = (got.double() - want.double()).abs().max().item()
    check(err <= eps * max(m, 1.0), f"{what}: error {err:g} beyond {eps * max(m, 1.0):g}")


def expect_error(fn, words, what):
    try:
        fn()
    except RuntimeError as e:
        msg = str(e)
        check(all(w in msg for w in words), f"{what}: error '{msg}' does not name {words}")
        return
    raise AssertionError(f"{what}: no error")


def rank_main(args):
    import torch
    import torch.distributed as dist
    import incxdp_torch  # noqa: F401

    r = args.rank
    dist.init_process_group("incxdp", init_method="file://" + args.rdv, rank=r,
                            world_size=WORLD)
    pg = dist.distributed_c10d._get_default_group()
    check(pg.protocol == "native" and pg.carrier in ("socket", "af_xdp")
          and pg.transport == f"native/{pg.carrier}", f"transport {pg.transport}")
    if os.environ.get("INCXDP_TRANSPORT") == "udp" or os.environ.get("INCXDP_CARRIER") == "socket":
        check(pg.carrier == "socket", f"carrier {pg.carrier}, asked for the socket")
    n = 5000  # several packets per collective
    everyone = lambda dt: [data(q, n, dt) for q in range(WORLD)]  # noqa: E731
    for dt in (torch.float32, torch.float16, torch.bfloat16, torch.int32):
        name = str(dt)
        full = [x.double() for x in everyone(dt)]
        ops = [(dist.ReduceOp.SUM, sum(full)),
               (dist.ReduceOp.MAX, torch.stack(full).max(0).values),
               (dist.ReduceOp.MIN, torch.stack(full).min(0).values)]
        if dt != torch.int32:
            ops.append((dist.ReduceOp.AVG, sum(full) / WORLD))
        for op, want in ops:
            t = data(r, n, dt)
            dist.all_reduce(t, op=op)
            check(t.dtype == dt, f"allreduce {name}: dtype changed")
            close(t, want.to(dt), dt, f"allreduce {op} {name}")
        # Reduce to rank 1.
        t = data(r, n, dt)
        dist.reduce(t, dst=1, op=dist.ReduceOp.SUM)
        if r == 1:
            close(t, sum(full).to(dt), dt, f"reduce {name}")
        # Broadcast and allgather move bits: exact for every type.
        t = data(r, n, dt)
        dist.broadcast(t, src=2)
        check(torch.equal(t, data(2, n, dt)), f"broadcast {name}: not bit-exact")
        outs = [torch.empty(n, dtype=dt) for _ in range(WORLD)]
        dist.all_gather(outs, data(r, n, dt))
        for q in range(WORLD):
            check(torch.equal(outs[q], data(q, n, dt)), f"allgather {name}: rank {q}'s block")
        flat = torch.empty(WORLD * n, dtype=dt)
        dist.all_gather_into_tensor(flat, data(r, n, dt))
        check(torch.equal(flat, torch.cat(everyone(dt))), f"all_gather_into_tensor {name}")
        # Reduce-scatter: rank r gets block r of the sum of every rank's input.
        block = n // WORLD
        out = torch.empty(block, dtype=dt)
        dist.reduce_scatter(out, list(data(r, n, dt).split(block)), op=dist.ReduceOp.SUM)
        close(out, sum(full)[r * block:(r + 1) * block].to(dt), dt, f"reduce_scatter {name}")
        out = torch.empty(block, dtype=dt)
        dist.reduce_scatter_tensor(out, data(r, n, dt))
        close(out, sum(full)[r * block:(r + 1) * block].to(dt), dt, f"reduce_scatter_tensor {name}")
    # Types that only move: int64 and float64 broadcast bit for bit.
    for dt in (torch.int64, torch.float64, torch.uint8):
        t = torch.arange(7, dtype=dt) * (r + 3)
        dist.broadcast(t, src=3)
        check(torch.equal(t, torch.arange(7, dtype=dt) * 6), f"broadcast {dt}")
    # Asynchronous work: queued in order, waited on, and through its future.
    a = torch.full((1000,), float(r + 1))
    b = torch.full((1000,), 2.0 * (r + 1), dtype=torch.float32)
    wa = dist.all_reduce(a, async_op=True)
    wb = dist.all_reduce(b, async_op=True)
    fut = wb.get_future()
    wa.wait()
    check(torch.equal(a, torch.full((1000,), 10.0)), "async allreduce a")
    res = fut.wait()
    check(torch.equal(res[0], torch.full((1000,), 20.0)), "async allreduce b future")
    dist.barrier()
    # Unsupported: reductions name the type or op; nothing was sent.
    expect_error(lambda: dist.all_reduce(torch.ones(4, dtype=torch.float64)),
                 ["torch.float64", "allreduce"], "float64 allreduce")
    expect_error(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int64)),
                 ["torch.int64"], "int64 allreduce")
    expect_error(lambda: dist.reduce_scatter(torch.ones(1, dtype=torch.float64),
                                             [torch.ones(1, dtype=torch.float64)] * WORLD),
                 ["torch.float64", "reduce_scatter"], "float64 reduce_scatter")
    expect_error(lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.PRODUCT),
                 ["PRODUCT"], "PRODUCT")
    expect_error(lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.AVG),
                 ["AVG", "torch.int32"], "int32 AVG")
    # Still usable after the refusals.
    t = torch.ones(3, dtype=torch.int32)
    dist.all_reduce(t)
    check(torch.equal(t, torch.full((3,), WORLD, dtype=torch.int32)), "allreduce after errors")
    dist.destroy_process_group()
    if r == 0:
        print("collectives_test: every collective and type checked on 4 ranks", flush=True)


def driver(args):
    if os.geteuid() != 0:
        sys.exit("collectives_test: needs root (network namespaces, XDP)")
    build = Path(args.build_dir)
    star = ddp_digits.Star(str(ddp_digits.REPO / "topo" / "topologies" / "star.yaml"),
                           str(build / "loader" / "incxdp"), "native")
    workdir = tempfile.mkdtemp(prefix="incxdp-torch-test-")
    env = dict(os.environ, PYTHONPATH=str(build / "python"),
               INCXDP_TOPOLOGY=star.topology, INCXDP_JOB="1", INCXDP_TRANSPORT=args.transport)
    ddp_digits.interrupt_on_signals()
    try:
        star.up(1)
        argv = lambda q: star.in_ns(f"w{q}", [  # noqa: E731
            sys.executable, __file__, "--rank", str(q), "--rdv", workdir + "/rdv"])
        ddp_digits.run_ranks(argv, env, 120, "collectives")
        return 0
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001  reported, then cleaned up
        print(f"collectives_test: FAIL: {e}", file=sys.stderr)
        return 1
    finally:
        star.down()
        import shutil
        shutil.rmtree(workdir, ignore_errors=True)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", default=str(ddp_digits.REPO / "build"))
    p.add_argument("--transport", default="udp")
    p.add_argument("--rank", type=int)
    p.add_argument("--rdv")
    args = p.parse_args()
    if args.rank is not None:
        rank_main(args)
        return 0
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())
