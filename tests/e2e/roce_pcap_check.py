#!/usr/bin/python3
# SPDX-License-Identifier: BSD-2-Clause
"""Independent checks of captured RoCEv2 frames (docs/ROCE.md).

For every UDP/4791 frame of the given pcap files:
  * the ICRC is recomputed with scapy's RoCE layer (scapy.contrib.roce),
    an implementation that shares nothing with incxdp's;
  * a nonzero UDP checksum (incxdp's hosts and switches send one, which the
    switches check in place of the ICRC) is recomputed by scapy;
  * tshark must decode it as InfiniBand BTH with the same opcode, PSN and
    destination QP as scapy reads;
  * per stream (source IP, destination IP, destination QP), the PSNs of
    SEND frames are classified as in order (+1 mod 2^24), gap (ahead by
    more than one), reordered (behind the highest so far, first time seen)
    or repeat (seen before: a retransmission); "missing" counts the PSNs
    between a stream's lowest and highest that never appeared.
  * ACK frames carry an ACK (0x1F..) or NAK-sequence (0x60..) syndrome, or
    one of incxdp's start handshake (0x40 request, 0x41 answer: reserved
    syndromes no RDMA device sends; docs/ROCE.md "Consecutive runs").
Prints a JSON summary; exits 1 on any ICRC or UDP checksum error, tshark
disagreement or bad syndrome, and with --strict-order on any gap, reorder or repeat,
with --complete on any missing PSN, and with --psns-per-stream N when a
stream did not carry exactly N distinct PSNs (a capture that covers a
whole run sees every frame each connection sent, from its first).
Run with Debian's python3 (/usr/bin/python3), which has python3-scapy.
"""
import argparse
import json
import subprocess
import sys

from scapy.all import IP, UDP, Ether, rdpcap  # noqa: E402
from scapy.contrib.roce import BTH  # noqa: E402

PSN_MOD = 1 << 24
SEND_OPCODES = {0, 1, 2, 3, 4, 5}
ACK_OPCODE = 0x11


def psn_diff(a, b):
    d = (a - b) % PSN_MOD
    return d - PSN_MOD if d >= PSN_MOD // 2 else d


def tshark_fields(path):
    r = subprocess.run(
        ["tshark", "-r", path, "-Y", "udp.dstport == 4791", "-T", "fields",
         "-e", "frame.number", "-e", "infiniband.bth.opcode",
         "-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp"],
        capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tshark -r {path} failed ({r.returncode}): {r.stderr.strip()}")
    out = r.stdout
    rows = {}
    for line in out.splitlines():
        parts = line.split("\t")
        if len(parts) != 4:
            continue
        num, opc, psn, qp = parts
        rows[int(num)] = (int(opc, 0) if opc else None, int(psn, 0) if psn else None,
                          int(qp, 0) if qp else None)
    return rows


def check_file(path, summary, streams):
    pkts = rdpcap(path)
    decoded = tshark_fields(path)
    for num, raw in enumerate(pkts, start=1):
        p = Ether(bytes(raw))
        if not (IP in p and UDP in p and p[UDP].dport == 4791):
            continue
        summary["frames"] += 1
        bth = p[BTH]
        icrc_got = bytes(raw)[-4:]
        icrc_want = bth.compute_icrc(None)
        if icrc_got != icrc_want:
            summary["icrc_bad"] += 1
            summary["errors"].append(f"{path}#{num}: ICRC {icrc_got.hex()} != scapy {icrc_want.hex()}")
        else:
            summary["icrc_ok"] += 1
        got = p[UDP].chksum
        if got == 0:
            summary["udp_csum_none"] += 1
        else:
            q = p.copy()
            del q[UDP].chksum
            want = Ether(bytes(q))[UDP].chksum
            if got != want:
                summary["udp_csum_bad"] += 1
                summary["errors"].append(f"{path}#{num}: UDP checksum {got:#06x} != scapy {want:#06x}")
            else:
                summary["udp_csum_ok"] += 1
        t = decoded.get(num)
        if t is None or t != (bth.opcode, bth.psn, bth.dqpn):
            summary["tshark_mismatch"] += 1
            summary["errors"].append(f"{path}#{num}: tshark {t} != scapy {(bth.opcode, bth.psn, bth.dqpn)}")
        else:
            summary["tshark_bth"] += 1
        if bth.opcode == ACK_OPCODE:
            payload = bytes(bth.payload)
            syn = payload[0] if payload else None
            if syn in (0x40, 0x41):
                summary["syncs"] += 1
            elif syn is None or not (syn == 0x1F or syn == 0x60):
                summary["bad_syndrome"] += 1
                summary["errors"].append(f"{path}#{num}: AETH syndrome {syn}")
            elif syn == 0x1F:
                summary["acks"] += 1
            else:
                summary["naks"] += 1
            continue
        if bth.opcode not in SEND_OPCODES:
            summary["other_opcodes"] += 1
            continue
        key = (p[IP].src, p[IP].dst, bth.dqpn)
        s = streams.setdefault(key, {"first": bth.psn, "high": None, "frames": 0, "in_order": 0,
                                     "reordered": 0, "repeat": 0, "gap": 0, "wraps": 0,
                                     "seen": set()})
        s["frames"] += 1
        if s["high"] is None:
            s["high"] = bth.psn
            s["seen"].add(bth.psn)
            continue
        d = psn_diff(bth.psn, s["high"])
        if d == 1:
            s["in_order"] += 1
        elif d <= 0:
            s["repeat" if bth.psn in s["seen"] else "reordered"] += 1
        else:
            s["gap"] += 1
        s["seen"].add(bth.psn)
        if d > 0:
            if bth.psn < s["high"]:
                s["wraps"] += 1
            s["high"] = bth.psn


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pcaps", nargs="+")
    ap.add_argument("--strict-order", action="store_true",
                    help="fail on any PSN gap or repeat (a run without loss)")
    ap.add_argument("--complete", action="store_true",
                    help="fail if a PSN between a stream's lowest and highest never appeared")
    ap.add_argument("--psns-per-stream", type=int, default=0,
                    help="fail unless every stream carried exactly this many distinct PSNs")
    ap.add_argument("--min-frames", type=int, default=1)
    args = ap.parse_args()
    summary = {"frames": 0, "icrc_ok": 0, "icrc_bad": 0, "udp_csum_ok": 0, "udp_csum_bad": 0,
               "udp_csum_none": 0, "tshark_bth": 0, "tshark_mismatch": 0,
               "acks": 0, "naks": 0, "syncs": 0, "bad_syndrome": 0, "other_opcodes": 0, "errors": []}
    streams = {}
    for path in args.pcaps:
        check_file(path, summary, streams)
    summary["streams"] = len(streams)
    for s in streams.values():
        # The lowest PSN need not be the first captured: a capture that
        # starts mid-stream may see a reordered pair's later frame first.
        rel = [psn_diff(p, s["first"]) for p in s.pop("seen")]
        s["missing"] = max(rel) - min(rel) + 1 - len(rel)
        s["psns"] = len(rel)
    for k in ("in_order", "reordered", "repeat", "gap", "missing", "wraps"):
        summary[k] = sum(s[k] for s in streams.values())
    summary["stream_detail"] = {f"{k[0]}->{k[1]} qp {k[2]:#x}": v for k, v in sorted(streams.items())}
    summary["errors"] = summary["errors"][:20]
    print(json.dumps(summary, indent=1))
    bad = (summary["icrc_bad"] or summary["udp_csum_bad"] or summary["tshark_mismatch"] or
           summary["bad_syndrome"])
    if args.strict_order and (summary["gap"] or summary["reordered"] or summary["repeat"]):
        bad = True
    if args.complete and summary["missing"]:
        bad = True
    if args.psns_per_stream:
        off = {k: v["psns"] for k, v in summary["stream_detail"].items()
               if v["psns"] != args.psns_per_stream}
        if off:
            print(f"streams without {args.psns_per_stream} distinct PSNs: {off}", file=sys.stderr)
            bad = True
    if summary["frames"] < args.min_frames:
        print(f"only {summary['frames']} RoCE frames captured", file=sys.stderr)
        bad = True
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
