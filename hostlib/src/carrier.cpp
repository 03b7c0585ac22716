// SPDX-License-Identifier: BSD-2-Clause
// Protocol x carrier (docs/HOSTLIB.md §5): the names users type, the one
// table of valid pairs and what opens each, and the Auto rule.
#include "carrier.h"

#include "packet.h"
#include "roce_engine.h"
#include "roce_frame.h"
#include "rx_backlog.h"
#include "verbs_link.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <stdexcept>
#include <system_error>

namespace incxdp {
namespace {

using detail::Carried;

// The native header's frames, the worker's address and port as the switch's
// worker table has them.
Carried open_native_socket(CommConfig &cfg) {
    UdpTransportConfig t;
    t.local_ip = cfg.local_ip;
    t.local_port = cfg.local_port;
    t.remote_ip = cfg.switch_ip;
    t.remote_port = cfg.effective_switch_port();
    t.socket_buffer = cfg.socket_buffer;
    t.batch = cfg.batch;
    t.gso = cfg.udp_gso;
    t.gro = cfg.udp_gro;
    return {make_udp_transport(t), nullptr};
}

AfXdpTransportConfig afxdp_config(const CommConfig &cfg) {
    AfXdpTransportConfig t;
    t.local_ip = cfg.local_ip;
    t.remote_ip = cfg.switch_ip;
    t.ifname = cfg.xdp_iface;
    t.queue = cfg.xdp_queue;
    t.follow_queues = cfg.xdp_follow_queues;
    t.tx_live_frames = cfg.xdp_tx_live_frames;
    t.batch = cfg.batch;
    t.rx_frames = std::max(t.rx_frames, detail::rx_queue_frames(cfg)); // rx_backlog.h
    return t;
}

Carried open_native_afxdp(CommConfig &cfg) {
    AfXdpTransportConfig t = afxdp_config(cfg);
    t.local_port = cfg.local_port;
    t.remote_port = cfg.effective_switch_port();
    t.max_payload = detail::header_len(cfg.wire) + 4 * size_t(cfg.effective_elems_per_packet());
    return {make_afxdp_transport(t), nullptr};
}

bool is_zero(const std::array<uint8_t, 6> &mac) {
    return mac == std::array<uint8_t, 6>{};
}

// RoCEv2 as whole frames hostlib builds: the kernel must not pick any header
// field the ICRC covers. The switch's frames come to local_ip:4791.
Carried open_roce_afxdp(CommConfig &cfg) {
    if (is_zero(cfg.roce.local_mac) || is_zero(cfg.roce.switch_mac)) {
        LinkInfo l = resolve_link(cfg.local_ip, cfg.switch_ip, cfg.xdp_iface);
        if (is_zero(cfg.roce.local_mac))
            cfg.roce.local_mac = l.local_mac;
        if (is_zero(cfg.roce.switch_mac))
            cfg.roce.switch_mac = l.remote_mac;
    }
    AfXdpTransportConfig t = afxdp_config(cfg);
    t.local_port = t.remote_port = INCXDP_ROCE_UDP_PORT;
    t.raw_frames = true;
    size_t payload = 4 * size_t(cfg.effective_elems_per_packet());
    t.max_payload = detail::RoceSendTemplate::frame_len(payload) - detail::kFrameHdrLen;
    return detail::carry_over(cfg, make_afxdp_transport(t));
}

// The device runs RC itself: no Transport, the link is the connection.
Carried open_roce_verbs(CommConfig &cfg) {
    return {nullptr, detail::make_verbs_link(cfg)};
}

using Opener = Carried (*)(CommConfig &);

// Every (protocol, carrier) pair but Auto: what opens it, or why it cannot be.
struct Route {
    Protocol protocol;
    Carrier carrier;
    Opener open;         ///< null: refused
    const char *refusal; ///< why, and what to use instead
};

constexpr Route kRoutes[] = {
    {Protocol::Native, Carrier::Socket, open_native_socket, nullptr},
    {Protocol::Native, Carrier::AfXdp, open_native_afxdp, nullptr},
    {Protocol::Native, Carrier::Verbs, nullptr,
     "an RDMA device carries RoCEv2 RC connections only, not the native or SwitchML "
     "header: use carrier socket or af_xdp (or auto), or a `kind: roce-tree` job for verbs"},
    {Protocol::Roce, Carrier::Socket, nullptr,
     "RoCEv2 cannot go through a kernel UDP socket: its ICRC covers the IPv4 ID, which the "
     "kernel picks per datagram: use carrier af_xdp (root; auto picks it) or verbs (an RDMA "
     "device)"},
    {Protocol::Roce, Carrier::AfXdp, open_roce_afxdp, nullptr},
    {Protocol::Roce, Carrier::Verbs, open_roce_verbs, nullptr},
};

const Route &route(Protocol p, Carrier c) {
    for (const Route &r : kRoutes)
        if (r.protocol == p && r.carrier == c)
            return r;
    throw std::logic_error(fmt::format("no carrier route for {}", to_string(p, c)));
}

// The protocol a carrier implies when it carries only one (socket: native,
// verbs: roce), for configs that have no job to take it from.
std::optional<Protocol> only_protocol(Carrier c) {
    std::optional<Protocol> only;
    int n = 0;
    for (const Route &r : kRoutes)
        if (r.carrier == c && r.open) {
            only = r.protocol;
            ++n;
        }
    return n == 1 ? only : std::nullopt;
}

// Why AF_XDP did not open, in a few words for the fallback notice.
std::string afxdp_failure(const std::exception &e) {
    auto *se = dynamic_cast<const std::system_error *>(&e);
    if (se && (se->code().value() == EPERM || se->code().value() == EACCES))
        return fmt::format("{}: not root (needs CAP_NET_ADMIN and CAP_BPF)",
                           se->code().value() == EPERM ? "EPERM" : "EACCES");
    std::string why = e.what();
    std::replace(why.begin(), why.end(), '\n', ' ');
    return why;
}

// Auto, native: AF_XDP where it attaches (it bypasses the stack,
// docs/PERF.md), else the socket with one line on stderr. Loopback has no
// interface worth bypassing: the socket, silently.
Carried open_native_auto(CommConfig &cfg) {
    if (cfg.xdp_iface.empty() && cfg.local_ip.starts_with("127.")) {
        cfg.carrier = Carrier::Socket;
        return open_native_socket(cfg);
    }
    cfg.carrier = Carrier::AfXdp;
    try {
        return open_native_afxdp(cfg);
    } catch (const std::exception &e) {
        std::string iface = cfg.xdp_iface;
        if (iface.empty()) {
            try {
                iface = resolve_link(cfg.local_ip, cfg.switch_ip).ifname;
            } catch (const std::exception &) {
                iface = "the interface holding " + cfg.local_ip;
            }
        }
        std::fprintf(stderr,
                     "incxdp: rank %u: AF_XDP on %s not available (%s); using the UDP "
                     "socket\n",
                     cfg.rank, iface.c_str(), afxdp_failure(e).c_str());
    }
    cfg.carrier = Carrier::Socket;
    return open_native_socket(cfg);
}

} // namespace

const char *to_string(Protocol p) {
    return p == Protocol::Roce ? "roce" : "native";
}

const char *to_string(Carrier c) {
    switch (c) {
    case Carrier::Socket:
        return "socket";
    case Carrier::AfXdp:
        return "af_xdp";
    case Carrier::Verbs:
        return "verbs";
    default:
        return "auto";
    }
}

std::string to_string(Protocol p, Carrier c) {
    return fmt::format("{}/{}", to_string(p), to_string(c));
}

std::string carrier_refusal(Protocol p, Carrier c) {
    if (c == Carrier::Auto)
        return {};
    const Route &r = route(p, c);
    return r.open ? std::string() : fmt::format("{}: {}", to_string(p, c), r.refusal);
}

CarrierName parse_carrier(const std::string &s) {
    if (s == "auto")
        return {std::nullopt, Carrier::Auto};
    if (s == "socket" || s == "udp")
        return {std::nullopt, Carrier::Socket};
    if (s == "af_xdp" || s == "afxdp" || s == "xdp")
        return {std::nullopt, Carrier::AfXdp};
    if (s == "verbs")
        return {std::nullopt, Carrier::Verbs};
    if (s == "roce") // the old transport name: RoCEv2 frames over AF_XDP
        return {Protocol::Roce, Carrier::AfXdp};
    throw std::invalid_argument(fmt::format("carrier '{}': expected auto, socket, af_xdp or verbs "
                                            "(or a transport name: udp, afxdp, roce)",
                                            s));
}

void CommConfig::use_carrier(const std::string &name, const std::string &job_desc) {
    if (name.empty())
        return;
    CarrierName n = parse_carrier(name);
    if (job_desc.empty()) {
        if (auto p = n.protocol ? n.protocol : only_protocol(n.carrier))
            protocol = *p;
    } else {
        const char *kind = protocol == Protocol::Roce ? "a roce-tree job (protocol roce)"
                                                      : "a star job or a native tree (protocol "
                                                        "native)";
        if (n.protocol && *n.protocol != protocol)
            throw std::invalid_argument(fmt::format(
                "{} is {}: '{}' speaks {}, which needs a {}; pick a carrier: {}", job_desc, kind,
                name, to_string(*n.protocol),
                *n.protocol == Protocol::Roce ? "`kind: roce-tree` job" : "star or tree job",
                protocol == Protocol::Roce ? "auto, af_xdp or verbs" : "auto, socket or af_xdp"));
        if (std::string why = carrier_refusal(protocol, n.carrier); !why.empty())
            throw std::invalid_argument(
                fmt::format("{} is {}: carrier '{}' refused: {}", job_desc, kind, name, why));
    }
    carrier = n.carrier;
}

namespace detail {

Carried open_carrier(CommConfig &cfg) {
    if (cfg.carrier == Carrier::Auto) {
        if (cfg.protocol == Protocol::Native)
            return open_native_auto(cfg);
        cfg.carrier = Carrier::AfXdp; // the one carrier of RoCEv2 frames without a device
    }
    const Route &r = route(cfg.protocol, cfg.carrier);
    if (!r.open)
        throw std::invalid_argument(fmt::format("communicator (rank {}, job {}): {}", cfg.rank,
                                                cfg.job,
                                                carrier_refusal(cfg.protocol, cfg.carrier)));
    return r.open(cfg);
}

Carried carry_over(const CommConfig &cfg, std::unique_ptr<Transport> transport) {
    if (!transport)
        throw std::invalid_argument("communicator: transport is null");
    if (cfg.carrier == Carrier::Verbs)
        throw std::invalid_argument(
            "communicator: carrier verbs sends through the RDMA device, not a given Transport");
    Carried c;
    if (cfg.protocol == Protocol::Roce)
        c.roce = std::make_unique<RoceEngine>(cfg, *transport);
    c.transport = std::move(transport);
    return c;
}

} // namespace detail
} // namespace incxdp
