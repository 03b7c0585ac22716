// SPDX-License-Identifier: BSD-2-Clause
// ref-pcap-switch's modes without a network: its frame code against scapy
// (bench/ref_pcap_check.py) and the tree plan as JSON for scripts
// (bench/ref_pcap_hosts.py).
#include "ref_pcap_tools.h"

#include "ref_pcap_frame.h"

#include <incxdp/roce.h>
#include <incxdp/tree_json.h>
#include <incxdp/util/ipv4.h>

#include <fmt/format.h>
#include <pcap/pcap.h>

#include <array>
#include <stdexcept>
#include <vector>

namespace incxdp::refsw {
namespace {

constexpr uint32_t kMaxElems = ROCE_MAX_ELEMS;

uint32_t ip_of(const char *s) {
    return util::ipv4_be_or_throw(s, "sample address");
}

Endpoint sample_endpoint() {
    return {{0x02, 0x49, 0x58, 0, 0, 0},
            {0x02, 0x49, 0x58, 3, 0, 0},
            ip_of("10.79.0.250"),
            ip_of("10.79.0.1"),
            0xC012,
            0x010011};
}

} // namespace

int write_frames(const std::string &path) {
    pcap_t *dead = pcap_open_dead(DLT_EN10MB, 65535);
    pcap_dumper_t *d = pcap_dump_open(dead, path.c_str());
    if (!d) {
        fmt::print(stderr, "ref-pcap-switch: {}: {}\n", path, pcap_geterr(dead));
        return 1;
    }
    std::array<uint8_t, kMaxFrame> buf;
    auto dump = [&](size_t len) {
        pcap_pkthdr h{};
        h.caplen = h.len = static_cast<bpf_u_int32>(len);
        pcap_dump(reinterpret_cast<u_char *>(d), &h, buf.data());
    };
    const Endpoint e = sample_endpoint();
    std::vector<int32_t> vals(kMaxElems);
    for (uint32_t i = 0; i < kMaxElems; ++i)
        vals[i] = static_cast<int32_t>(i * 2654435761u);
    const uint32_t imm =
        roce_imm_make(ROCE_IMM_ALL_RANKS, ROCE_PRIM_ALLREDUCE, ROCE_OPR_SUM, ROCE_DTYPE_INT32);
    dump(build_send(buf.data(), e, 0x10008, false, imm, vals));
    dump(build_send(buf.data(), e, 0xFFFFFF, true, imm, {vals.data(), 16}));
    dump(build_send(buf.data(), e, 7, false,
                    roce_imm_make(2, ROCE_PRIM_REDUCE, ROCE_OPR_MAX, ROCE_DTYPE_FLOAT32), {}));
    dump(build_ack(buf.data(), e, 0x123456, ROCE_AETH_ACK | 42));
    dump(build_ack(buf.data(), e, 0x10000, ROCE_AETH_NAK_SEQ | 0xABCDEF));
    pcap_dump_close(d);
    pcap_close(dead);
    return 0;
}

int check_frames(const std::string &path) {
    char err[PCAP_ERRBUF_SIZE] = "";
    pcap_t *p = pcap_open_offline(path.c_str(), err);
    if (!p) {
        fmt::print(stderr, "ref-pcap-switch: {}\n", err);
        return 1;
    }
    pcap_pkthdr *h = nullptr;
    const u_char *b = nullptr;
    while (pcap_next_ex(p, &h, &b) == 1) {
        View v;
        const Parse r = parse(b, h->caplen, v);
        fmt::print("{}", to_string(r));
        if (r == Parse::Ok || r == Parse::BadIcrc) {
            fmt::print(" opcode={} dqpn={} psn={} ackreq={} payload={}", v.opcode, v.dqpn, v.psn,
                       int(v.ackreq), v.payload_len);
            if (v.imm)
                fmt::print(" imm={}", *v.imm);
            if (v.aeth)
                fmt::print(" aeth={}", *v.aeth);
        }
        fmt::print("\n");
    }
    pcap_close(p);
    return 0;
}

// The plan as scripts and bench/ref_pcap_hosts.py see it.
nlohmann::json plan_json(const topo::TreePlan &plan) {
    nlohmann::json conns = nlohmann::json::array(), sws = nlohmann::json::array();
    for (const auto &c : plan.conns)
        conns.push_back(c); // incxdp/tree_json.h
    for (const auto &s : plan.switches)
        sws.push_back(
            {{"name", s.name},
             {"root", s.root},
             {"parent_conn", s.parent_conn ? nlohmann::json(*s.parent_conn) : nlohmann::json()},
             {"child_conns", s.child_conns},
             {"pool_size", s.pool_size}});
    return {{"job", plan.job},     {"root", plan.root},
            {"ranks", plan.ranks}, {"host_conn", plan.host_conn},
            {"conns", conns},      {"switches", sws}};
}

} // namespace incxdp::refsw
