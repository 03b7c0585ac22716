#!/usr/bin/python3
# SPDX-License-Identifier: BSD-2-Clause
"""Scapy hosts against a running ref-pcap-switch tree (bench/ref_tree.sh).

Every rank of the job is played from this one process through an AF_PACKET
socket opened inside the rank's namespace; frames are built by scapy's RoCE
layer (so independently of incxdp's code). Checks docs/ROCE.md §1-§3 as the
switches implement it: AllReduce SUM/MAX/MIN over more than two pool
lengths (both shadow sets, slot reuse), Reduce and Broadcast (cuts and
non-adding), Barrier, AckReq -> ACK, ahead -> one NAK then silence,
duplicates -> ACK (incomplete) or the result again, a bad ICRC ignored.
With --chaos, an up frame lost on the way to the root must come back through
the leaf's retransmission thread (1 s timeout) with no host retransmitting.
Run it under ref_tree.sh, which gives it $REF_TREE_PID to reset the switches:
  bench/ref_tree.sh TOPO PREFIX -- /usr/bin/python3 bench/ref_pcap_hosts.py \\
      --topo TOPO --prefix PREFIX [--bin build-ref/bench/ref-pcap-switch] \\
      [--chaos build/loader/incxdp]
"""
import argparse
import ctypes
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

from scapy.all import IP, UDP, Ether, Raw
from scapy.contrib.roce import BTH

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
CLONE_NEWNET = 0x40000000
MASK = 0xFFFFFF
SUM, MAX, MIN, BARRIER = 1, 2, 3, 0
ALLREDUCE, REDUCE, BROADCAST = 0, 1, 2

libc = ctypes.CDLL(None, use_errno=True)
errors = []


def check(cond, what):
    if not cond:
        errors.append(what)
        print("FAIL", what, flush=True)


def imm_make(dest, prim, op, dtype=0):
    return dest << 16 | (prim & 3) << 14 | (op & 3) << 12 | (dtype & 0xF) << 8


def socket_in_netns(ns, iface):
    """An AF_PACKET socket bound to iface inside /var/run/netns/ns."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind((iface, 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    finally:
        libc.setns(own, CLONE_NEWNET)
        os.close(own)
        os.close(target)
    return s


class Rank:
    def __init__(self, r, conn, prefix):
        self.r = r
        self.c = conn
        self.sock = socket_in_netns(prefix + conn["child"], conn["child_iface"])

    def frame(self, idx, imm, vals, ackreq=0, opcode=0x05):
        psn = (self.c["up_base"] + idx) & MASK
        body = (struct.pack("!I", imm) if opcode in (3, 5) else b"") + \
            b"".join(struct.pack("!i", v) for v in vals)
        return bytes(Ether(src=self.c["child_mac"], dst=self.c["parent_mac"]) /
                     IP(src=self.c["child_ip"], dst=self.c["parent_ip"], id=0, flags="DF", ttl=64) /
                     UDP(sport=self.c["child_sport"], dport=4791, chksum=0) /
                     BTH(opcode=opcode, psn=psn, dqpn=self.c["parent_qpn"], ackreq=ackreq) /
                     Raw(body))

    def send(self, idx, imm, vals, **kw):
        self.sock.send(self.frame(idx, imm, vals, **kw))

    def recv(self, timeout=2.0):
        """RoCE frames to this rank until `timeout` passes without one."""
        out = []
        while select.select([self.sock], [], [], timeout)[0]:
            data, addr = self.sock.recvfrom(65535)
            if addr[2] == PACKET_OUTGOING or len(data) < 58 or data[12:14] != b"\x08\x00" \
                    or data[23] != 17 or struct.unpack("!H", data[36:38])[0] != 4791:
                continue
            out.append(self.decode(data))
            timeout = 0.3
        return out

    def decode(self, data):
        p = Ether(data)
        bth = p[BTH]
        check(data[-4:] == bth.compute_icrc(None), f"rank {self.r}: ICRC of a frame from the switch")
        check(p[IP].src == self.c["parent_ip"] and p[UDP].sport == self.c["parent_sport"] and
              bth.dqpn == self.c["child_qpn"] and p.src == self.c["parent_mac"],
              f"rank {self.r}: addressing {p[IP].src} {p[UDP].sport} {bth.dqpn:#x}")
        body = data[54:-4]
        f = {"opcode": bth.opcode, "psn": bth.psn}
        if bth.opcode == 0x11:
            f["aeth"] = struct.unpack("!I", body[:4])[0]
        else:
            f["idx"] = (bth.psn - self.c["down_base"]) & MASK
            f["imm"] = struct.unpack("!I", body[:4])[0]
            f["vals"] = list(struct.unpack(f"!{(len(body) - 4) // 4}i", body[4:]))
        return f


def data_of(rank, idx, n, op):
    if op == BARRIER:
        return []
    return [((rank + 1) * 1000003 + idx * 7919 + i * 31) % 200001 - 100000 for i in range(n)]


def reduce_vals(vs, op):
    if op == MAX:
        return [max(c) for c in zip(*vs)]
    if op == MIN:
        return [min(c) for c in zip(*vs)]
    return [((sum(c) + 2**31) % 2**32) - 2**31 for c in zip(*vs)]


def reset():
    os.kill(int(os.environ["REF_TREE_PID"]), signal.SIGHUP)
    time.sleep(0.5)


def collective(ranks, prim, op, count, n=16, root=0, first=0, batch=32):
    """idx first..first+count-1 from every rank, a batch at a time; checks every result."""
    name = f"{['allreduce', 'reduce', 'broadcast'][prim]} op {op} idx {first}+{count}"
    world = len(ranks)
    imm = imm_make(0xFFFF if prim == ALLREDUCE else root, prim, op)
    for b0 in range(first, first + count, batch):
        idxs = range(b0, min(b0 + batch, first + count))
        want = {}
        for idx in idxs:
            contrib = [data_of(r, idx, n, op) if prim != BROADCAST or r == root else []
                       for r in range(world)]
            if prim == BROADCAST:
                want[idx] = contrib[root]
            else:
                want[idx] = reduce_vals(contrib, op) if n and op != BARRIER else []
            for r, rk in enumerate(ranks):
                rk.send(idx, imm, contrib[r])
        for r, rk in enumerate(ranks):
            got = {f["idx"]: f for f in rk.recv() if f["opcode"] == 0x05}
            for idx in idxs:
                f = got.get(idx)
                if f is None:
                    check(False, f"{name}: rank {r} has no result for idx {idx}")
                    continue
                exp = want[idx] if prim != REDUCE or r == root else []
                check(f["vals"] == exp and f["imm"] == imm,
                      f"{name}: rank {r} idx {idx}: {f['vals'][:4]}.. imm {f['imm']:#x}, want {exp[:4]}..")
            check(len(got) == len(idxs), f"{name}: rank {r}: {len(got)} results for {len(idxs)} idx")


def protocol_cases(ranks):
    imm = imm_make(0xFFFF, ALLREDUCE, SUM)
    r0, world = ranks[0], len(ranks)
    v = [1] * 16
    # AckReq on an incomplete set -> ACK, PSN = its PSN
    r0.send(0, imm, v, ackreq=1)
    fs = r0.recv(1.0)
    check([f.get("aeth", 0) >> 24 for f in fs] == [0x1F] and fs[0]["psn"] == r0.c["up_base"] & MASK,
          f"AckReq: {fs}")
    # Duplicate of an incomplete set -> ACK of epsn - 1
    r0.send(0, imm, v)
    fs = r0.recv(1.0)
    check(len(fs) == 1 and fs[0].get("aeth", 0) >> 24 == 0x1F and
          fs[0]["psn"] == r0.c["up_base"] & MASK, f"duplicate, incomplete: {fs}")
    # Ahead (idx 2, epsn is idx 1) -> one NAK with PSN epsn, then silence
    r0.send(2, imm, v)
    r0.send(3, imm, v)
    fs = r0.recv(1.0)
    check(len(fs) == 1 and fs[0].get("aeth", 0) >> 24 == 0x60 and
          fs[0]["psn"] == (r0.c["up_base"] + 1) & MASK, f"ahead: {fs}")
    # Bad ICRC: ignored (idx 1 stays expected)
    bad = bytearray(r0.frame(1, imm, v))
    bad[-1] ^= 0xFF
    r0.sock.send(bytes(bad))
    check(r0.recv(0.5) == [], "bad ICRC answered")
    # Complete idx 0 -> every rank gets 4 x 1
    for rk in ranks[1:]:
        rk.send(0, imm, v)
    for r, rk in enumerate(ranks):
        fs = [f for f in rk.recv(1.0) if f["opcode"] == 5]
        check(len(fs) == 1 and fs[0]["idx"] == 0 and fs[0]["vals"] == [world] * 16,
              f"idx 0 result to rank {r}: {fs}")
    # Duplicate after the result -> the result again (via the root for a leaf switch)
    r0.send(0, imm, v)
    fs = r0.recv(1.0)
    check(len(fs) == 1 and fs[0].get("idx") == 0 and fs[0]["vals"] == [world] * 16,
          f"duplicate, complete: {fs}")
    # NAK from a host for idx 0 of our stream -> the result again
    nak = (Ether(src=r0.c["child_mac"], dst=r0.c["parent_mac"]) /
           IP(src=r0.c["child_ip"], dst=r0.c["parent_ip"], flags="DF") /
           UDP(sport=r0.c["child_sport"], dport=4791, chksum=0) /
           BTH(opcode=0x11, psn=r0.c["down_base"] & MASK, dqpn=r0.c["parent_qpn"]) /
           Raw(struct.pack("!I", 0x60000000)))
    r0.sock.send(bytes(nak))
    fs = r0.recv(1.0)
    check(len(fs) == 1 and fs[0].get("idx") == 0, f"NAK from host: {fs}")
    # Go back N from idx 1 finishes idx 1..3
    collective(ranks, ALLREDUCE, SUM, 3, first=1)


def retransmit_case(ranks, chaos, prefix, plan):
    """An up frame lost: the leaf's retransmission thread sends it again after 1 s,
    with no host retransmitting. Loss by `incxdp chaos` on the leaf's parent port."""
    leaf = next(s for s in plan["switches"] if not s["root"])
    up = plan["conns"][leaf["parent_conn"]]
    ns = ["nsenter", f"--net=/var/run/netns/{prefix}{leaf['name']}", chaos, "chaos",
          up["child_iface"], "--pin-dir", "/sys/fs/bpf/incxdp-chaos-refsw"]
    subprocess.run(ns + ["--loss", "100%"], check=True, capture_output=True)
    try:
        imm = imm_make(0xFFFF, ALLREDUCE, SUM)
        for rk in ranks:
            rk.send(0, imm, [2] * 16)
        time.sleep(0.3)
    finally:
        subprocess.run(ns + ["--off"], check=True, capture_output=True)
        try:
            os.rmdir("/sys/fs/bpf/incxdp-chaos-refsw")  # --off leaves the empty root
        except OSError:
            pass
    t = time.time()
    for r, rk in enumerate(ranks):
        fs = [f for f in rk.recv(2.5) if f["opcode"] == 5]
        check(len(fs) == 1 and fs[0]["vals"] == [2 * len(ranks)] * 16,
              f"retransmission: rank {r}: {fs}")
    check(time.time() - t > 0.5, "retransmission: the result came before the 1 s timeout")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--topo", required=True)
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--job", default="1")
    ap.add_argument("--bin", default="build-ref/bench/ref-pcap-switch")
    ap.add_argument("--chaos", help="incxdp CLI (build/loader/incxdp): also test the "
                    "retransmission thread by losing an up frame with `incxdp chaos`")
    a = ap.parse_args()
    plan = json.loads(subprocess.run([a.bin, "--topo", a.topo, "--job", a.job, "--plan"],
                                     check=True, capture_output=True, text=True).stdout)
    pool = plan["switches"][0]["pool_size"]
    ranks = [Rank(r, plan["conns"][c], a.prefix) for r, c in enumerate(plan["host_conn"])]
    steps = [
        ("protocol", lambda: protocol_cases(ranks)),
        ("allreduce sum", lambda: collective(ranks, ALLREDUCE, SUM, 2 * pool + 40, n=512, batch=64)),
        ("allreduce max", lambda: collective(ranks, ALLREDUCE, MAX, 40)),
        ("allreduce min", lambda: collective(ranks, ALLREDUCE, MIN, 40)),
        ("reduce root 2", lambda: collective(ranks, REDUCE, SUM, 40, root=2)),
        ("broadcast root 1", lambda: collective(ranks, BROADCAST, SUM, 40, root=1)),
        ("barrier", lambda: collective(ranks, ALLREDUCE, BARRIER, 40, n=0)),
    ]
    if a.chaos:
        steps.append(("retransmission", lambda: retransmit_case(ranks, a.chaos, a.prefix, plan)))
    for name, fn in steps:
        before = len(errors)
        reset()
        t = time.time()
        fn()
        print(f"{name}: {'ok' if len(errors) == before else 'FAILED'} ({time.time() - t:.1f} s)",
              flush=True)
    print("OK" if not errors else f"{len(errors)} errors")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
