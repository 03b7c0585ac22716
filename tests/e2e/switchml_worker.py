#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""A SwitchML worker written from docs/PROTOCOLS.md §2 alone (no incxdp code):
sends int32 chunks in W slots alternating shadow sets, retransmits on
timeout, and checks every result. Used by the e2e tests to prove that a
third-party SwitchML client works against an incxdp switch set up with
nothing but `incxdp load` and `incxdp job add`.

Exit 0 if every chunk came back with the expected sum."""
import argparse
import socket
import struct
import sys
import time


def chunk_values(rank, chunk, n):
    # Deterministic, different per rank and chunk, includes negatives.
    return [((rank + 1) * 7919 * (chunk + 1) + i * 31 - 5000) & 0xffffffff for i in range(n)]


def to_signed(v):
    return v - (1 << 32) if v & 0x80000000 else v


def expected(world, chunk, n):
    tot = [0] * n
    for r in range(world):
        for i, v in enumerate(chunk_values(r, chunk, n)):
            tot[i] = (tot[i] + v) & 0xffffffff
    return [to_signed(v) for v in tot]


def packet(msg_type, size, job, tsi, slot, shadow, e0, e1, vals):
    hdr = struct.pack("<BBI", (msg_type << 4) | size, job, tsi)  # tsi little-endian
    hdr += struct.pack(">Hbb", slot | (shadow << 15), e0, e1)
    return hdr + struct.pack(">%dI" % len(vals), *vals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--local", required=True, help="ip:port to bind")
    ap.add_argument("--switch", required=True, help="switch ip[:port], default port 0xBEE0")
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--window", type=int, default=8)
    ap.add_argument("--size", type=int, default=1, choices=[0, 1, 2, 3])
    ap.add_argument("--drop-first-result", type=int, default=-1,
                    help="ignore the first result of this chunk, forcing a retransmission")
    ap.add_argument("--timeout", type=float, default=0.05)
    ap.add_argument("--deadline", type=float, default=30.0)
    a = ap.parse_args()

    n = 32 << a.size
    lip, lport = a.local.rsplit(":", 1)
    sw = a.switch.rsplit(":", 1) if ":" in a.switch else [a.switch, "48864"]
    swaddr = (sw[0], int(sw[1]))
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((lip, int(lport)))
    # Connected: the kernel drops datagrams from any other address or port,
    # so results must come from exactly the port the worker sends to.
    s.connect(swaddr)
    s.settimeout(0.005)

    W = min(a.window, a.chunks)
    inflight = {}  # slot -> (chunk, shadow, payload, sent_at)
    shadow = [0] * W
    done = 0
    retx = 0
    dropped_once = False
    start = time.time()

    def send(slot, chunk):
        p = packet(0, a.size, 1, chunk, slot, shadow[slot], 0, 0, chunk_values(a.rank, chunk, n))
        s.send(p)
        inflight[slot] = (chunk, shadow[slot], p, time.time())

    # Slot s carries chunks s, s+W, s+2W, ...: every worker must put the
    # same chunk in the same slot and set.
    for slot in range(W):
        send(slot, slot)

    while done < a.chunks:
        if time.time() - start > a.deadline:
            print("rank %d: timeout, %d of %d chunks done" % (a.rank, done, a.chunks))
            return 1
        try:
            data = s.recv(4096)
        except socket.timeout:
            data = None
        now = time.time()
        if data:
            mt = data[0] >> 4
            size = data[0] & 7
            tsi = struct.unpack("<I", data[2:6])[0]
            pool = struct.unpack(">H", data[6:8])[0]
            slot, sh = pool & 0x3fff, pool >> 15
            if mt != 1 or size != a.size or slot not in inflight:
                continue
            chunk, want_sh, _, _ = inflight[slot]
            if sh != want_sh or tsi != chunk:
                continue  # a late duplicate of an earlier use of this slot
            if chunk == a.drop_first_result and not dropped_once:
                dropped_once = True
                continue
            got = [to_signed(v) for v in struct.unpack(">%dI" % n, data[10:10 + 4 * n])]
            if got != expected(a.world, chunk, n):
                exp_ = expected(a.world, chunk, n)
                bad = [i for i in range(n) if got[i] != exp_[i]]
                print("rank %d: chunk %d slot %d set %d wrong result at %d elements, first %d: got %d want %d" % (a.rank, chunk, slot, sh, len(bad), bad[0], got[bad[0]], exp_[bad[0]]))
                return 1
            del inflight[slot]
            done += 1
            shadow[slot] ^= 1
            if chunk + W < a.chunks:
                send(slot, chunk + W)
        for slot, (chunk, sh, p, t) in list(inflight.items()):
            if now - t > a.timeout:
                s.send(p)
                inflight[slot] = (chunk, sh, p, now)
                retx += 1
    print("rank %d: %d chunks of %d elements OK, %d retransmissions" % (a.rank, a.chunks, n, retx))
    return 0


if __name__ == "__main__":
    sys.exit(main())
