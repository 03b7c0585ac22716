#!/usr/bin/python3
# SPDX-License-Identifier: BSD-2-Clause
"""ref-pcap-switch's frame code against scapy's RoCE layer (scapy.contrib.roce).

Both directions:
  * frames the switch builds (ref-pcap-switch --write-frames) must carry the
    ICRC scapy computes, a valid IPv4 checksum, IPv4 ID 0, DF, TTL 64, UDP
    checksum 0 and the expected BTH/AETH/ImmDt/payload;
  * frames scapy builds must parse (ref-pcap-switch --check-frames) with the
    same fields, and a frame with a flipped bit must fail its ICRC.
Usage: /usr/bin/python3 bench/ref_pcap_check.py build-ref/bench/ref-pcap-switch
(Debian's python3, which has python3-scapy.) Exits 1 on any difference.
"""
import os
import struct
import subprocess
import sys
import tempfile

from scapy.all import IP, UDP, Ether, Raw, rdpcap, wrpcap
from scapy.contrib.roce import AETH, BTH

IMM_ALLREDUCE_SUM = 0xFFFF << 16 | 0 << 14 | 1 << 12 | 0 << 8
IMM_REDUCE_MAX_F32 = 2 << 16 | 1 << 14 | 2 << 12 | 1 << 8

errors = []


def expect(cond, what):
    if not cond:
        errors.append(what)


def vals_be(n):
    return b"".join(struct.pack("!I", (i * 2654435761) & 0xFFFFFFFF) for i in range(n))


def check_built(binary, tmp):
    path = os.path.join(tmp, "built.pcap")
    subprocess.run([binary, "--write-frames", path], check=True)
    want = [  # (opcode, psn, ackreq, imm, aeth, payload)
        (0x05, 0x10008, 0, IMM_ALLREDUCE_SUM, None, vals_be(512)),
        (0x05, 0xFFFFFF, 1, IMM_ALLREDUCE_SUM, None, vals_be(16)),
        (0x05, 7, 0, IMM_REDUCE_MAX_F32, None, b""),
        (0x11, 0x123456, 0, None, 0x1F00002A, b""),
        (0x11, 0x10000, 0, None, 0x60ABCDEF, b""),
    ]
    pkts = rdpcap(path)
    expect(len(pkts) == len(want), f"built: {len(pkts)} frames, want {len(want)}")
    for k, (raw, w) in enumerate(zip(pkts, want)):
        raw = bytes(raw)
        p = Ether(raw)
        ip, udp, bth = p[IP], p[UDP], p[BTH]
        icrc_want = bth.compute_icrc(None)
        expect(raw[-4:] == icrc_want, f"built #{k}: ICRC {raw[-4:].hex()} != scapy {icrc_want.hex()}")
        ip2 = IP(bytes(ip))
        ip2.chksum = None
        expect(IP(bytes(ip2)).chksum == ip.chksum, f"built #{k}: IPv4 checksum")
        expect(ip.id == 0 and ip.flags == "DF" and ip.ttl == 64 and ip.tos == 0,
               f"built #{k}: IPv4 id/flags/ttl/tos {ip.id} {ip.flags} {ip.ttl} {ip.tos}")
        expect(ip.len == len(raw) - 14 and udp.len == ip.len - 20, f"built #{k}: lengths")
        expect(udp.chksum == 0 and udp.sport == 0xC012 and udp.dport == 4791, f"built #{k}: UDP")
        expect(bth.dqpn == 0x010011 and bth.pkey == 0xFFFF and bth.padcount == 0,
               f"built #{k}: BTH qpn/pkey/pad")
        op, psn, ackreq, imm, aeth, payload = w
        expect((bth.opcode, bth.psn, bth.ackreq) == (op, psn, ackreq),
               f"built #{k}: BTH {(bth.opcode, bth.psn, bth.ackreq)} != {(op, psn, ackreq)}")
        body = raw[54:-4]
        if aeth is not None:
            a = p[AETH]
            expect((a.syndrome << 24 | a.msn) == aeth, f"built #{k}: AETH {a.syndrome:#x} {a.msn:#x}")
            expect(len(body) == 4, f"built #{k}: ACK length")
        else:
            expect(struct.unpack("!I", body[:4])[0] == imm, f"built #{k}: ImmDt")
            expect(body[4:] == payload, f"built #{k}: payload")
    return len(pkts)


def scapy_frame(opcode, psn, dqpn, rest, ackreq=0, pad=0):
    return (Ether(src="02:49:58:03:00:00", dst="02:49:58:00:00:00") /
            IP(src="10.79.0.1", dst="10.79.0.250", id=0, flags="DF", ttl=64) /
            UDP(sport=0xC011, dport=4791, chksum=0) /
            BTH(opcode=opcode, psn=psn, dqpn=dqpn, ackreq=ackreq, padcount=pad) / Raw(rest))


def check_parsed(binary, tmp):
    imm = struct.pack("!I", IMM_ALLREDUCE_SUM)
    frames = [
        (scapy_frame(0x05, 0x10000, 0x010012, imm + vals_be(512), ackreq=1),
         f"ok opcode=5 dqpn={0x010012} psn={0x10000} ackreq=1 payload=2048 imm={IMM_ALLREDUCE_SUM}"),
        (scapy_frame(0x05, 0xFFFFFF, 0x010012, imm),
         f"ok opcode=5 dqpn={0x010012} psn={0xFFFFFF} ackreq=0 payload=0 imm={IMM_ALLREDUCE_SUM}"),
        (scapy_frame(0x04, 3, 0x22, vals_be(16)), "ok opcode=4 dqpn=34 psn=3 ackreq=0 payload=64"),
        (scapy_frame(0x04, 3, 0x22, vals_be(16) + b"\0\0", pad=2),
         "ok opcode=4 dqpn=34 psn=3 ackreq=0 payload=64"),
        (scapy_frame(0x11, 0x77, 0x22, struct.pack("!I", 0x60000005)),
         f"ok opcode=17 dqpn=34 psn={0x77} ackreq=0 payload=0 aeth={0x60000005}"),
        (scapy_frame(0x0A, 1, 0x22, vals_be(16)), "malformed"),  # RDMA WRITE: not ours
    ]
    raws = [bytes(f) for f, _ in frames]
    want = [w for _, w in frames]
    bad = bytearray(raws[0])
    bad[100] ^= 0x01  # a payload bit
    raws.append(bytes(bad))
    want.append(want[0].replace("ok", "bad-icrc", 1))
    padded = bytes(scapy_frame(0x11, 0x77, 0x22, struct.pack("!I", 0x1F000001))) + b"\0" * 8
    raws.append(padded)  # Ethernet padding after the ICRC is ignored
    want.append(f"ok opcode=17 dqpn=34 psn={0x77} ackreq=0 payload=0 aeth={0x1F000001}")
    path = os.path.join(tmp, "scapy.pcap")
    wrpcap(path, [Ether(r) for r in raws])
    got = subprocess.run([binary, "--check-frames", path], check=True, capture_output=True,
                         text=True).stdout.splitlines()
    expect(len(got) == len(want), f"parsed: {len(got)} lines, want {len(want)}")
    for k, (g, w) in enumerate(zip(got, want)):
        expect(g == w, f"parsed #{k}: '{g}' != '{w}'")
    return len(raws)


def main():
    binary = sys.argv[1] if len(sys.argv) > 1 else "build-ref/bench/ref-pcap-switch"
    with tempfile.TemporaryDirectory() as tmp:
        n_built = check_built(binary, tmp)
        n_parsed = check_parsed(binary, tmp)
    for e in errors:
        print("FAIL", e)
    print(f"{n_built} built frames checked with scapy, {n_parsed} scapy frames parsed: "
          f"{'OK' if not errors else f'{len(errors)} errors'}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
