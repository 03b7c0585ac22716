// SPDX-License-Identifier: BSD-2-Clause
#include "verbs_session.h"

#include <incxdp/util/ipv4.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <poll.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <system_error>

namespace incxdp::detail {
namespace {

using Clock = std::chrono::steady_clock;

// Receive WR ids carry this bit; send WR ids are the send sequence (= idx).
// Error completions have no valid opcode, so the id is what tells them apart.
constexpr uint64_t kRecvTag = uint64_t(1) << 63;
constexpr int kPollBatch = 32;
constexpr int kPostBatch = 32;
// Receive WRs beyond the window: results never outnumber the window, the
// margin only spares a repost race any thought.
constexpr uint32_t kRecvMargin = 8;
// Acknowledge CQ events in batches (ibv_ack_cq_events takes a mutex).
constexpr unsigned kEventAckBatch = 64;
constexpr uint8_t kMinRnrTimer = 12; // 0.64 ms; the switch never sends RNR NAKs
constexpr uint32_t kMaxWindow = 1u << 15;
constexpr uint32_t kMaxSignalEvery = 1024;
constexpr size_t kMaxSeen = 16; // GIDs named in a "no GID for this IP" error

[[noreturn]] void throw_errno(int err, const std::string &what) {
    throw std::system_error(err, std::generic_category(), what);
}

// Network order.
uint32_t parse_ipv4(const std::string &ip, const char *what) {
    return util::ipv4_be_or_throw(ip, fmt::format("verbs: {}", what));
}

const char *gid_type_name(uint32_t t) {
    switch (t) {
    case IBV_GID_TYPE_IB:
        return "IB";
    case IBV_GID_TYPE_ROCE_V1:
        return "RoCEv1";
    case IBV_GID_TYPE_ROCE_V2:
        return "RoCEv2";
    }
    return "?";
}

struct DeviceList {
    ibv_device **list = nullptr;
    int n = 0;
    int err = 0;
    DeviceList() {
        errno = 0;
        list = ibv_get_device_list(&n);
        err = errno;
    }
    ~DeviceList() {
        if (list)
            ibv_free_device_list(list);
    }
    DeviceList(const DeviceList &) = delete;
    DeviceList &operator=(const DeviceList &) = delete;
};

std::string no_device_reason(const DeviceList &d) {
    // rdma-core returns NULL with ENOSYS when the kernel has no
    // /sys/class/infiniband_verbs (ib_uverbs absent), an empty list when it
    // has the class but no device.
    const char *hint = "needs a RoCE NIC or Soft-RoCE, e.g. `modprobe rdma_rxe; "
                       "rdma link add rxe0 type rxe netdev eth0`";
    if (!d.list)
        return fmt::format("no RDMA device: ibv_get_device_list failed: {} (errno {}){}; {}",
                           std::strerror(d.err), d.err,
                           d.err == ENOSYS ? ", the kernel exposes no uverbs devices" : "", hint);
    return fmt::format("no RDMA device: ibv_get_device_list is empty; {}", hint);
}

} // namespace

// ---- pure parts ----------------------------------------------------------

void VerbsConfig::validate() const {
    auto bad = [](const std::string &m) { throw std::invalid_argument("verbs: " + m); };
    if (switch_ip.empty())
        bad("switch_ip is empty (RoceConn::parent_ip)");
    parse_ipv4(switch_ip, "switch_ip");
    if (!local_ip.empty())
        parse_ipv4(local_ip, "local_ip");
    else if (gid_index == kVerbsGidAuto)
        bad("local_ip is empty: it selects the RoCEv2 GID (or set gid_index)");
    if (remote_qpn > ROCE_QPN_MASK || remote_qpn < 2)
        bad(fmt::format("remote_qpn 0x{:x} is not a QPN of an RC QP (2 .. 0xffffff)", remote_qpn));
    if (sq_psn > ROCE_PSN_MASK || rq_psn > ROCE_PSN_MASK)
        bad(fmt::format("sq_psn 0x{:x} / rq_psn 0x{:x}: PSNs have 24 bits", sq_psn, rq_psn));
    if (window == 0 || window > kMaxWindow)
        bad(fmt::format("window {} is not in 1..{}", window, kMaxWindow));
    if (max_payload > ROCE_MAX_PAYLOAD || max_payload % 4)
        bad(fmt::format("max_payload {} is not a multiple of 4 up to {} (one packet per SEND)",
                        max_payload, ROCE_MAX_PAYLOAD));
    if (signal_every == 0 || signal_every > kMaxSignalEvery)
        bad(fmt::format("signal_every {} is not in 1..{}", signal_every, kMaxSignalEvery));
    if (ack_timeout > 31 || retry_cnt > 7 || rnr_retry > 7)
        bad(fmt::format("ack_timeout {} (<= 31), retry_cnt {} (<= 7), rnr_retry {} (<= 7)",
                        ack_timeout, retry_cnt, rnr_retry));
    if (timeout.count() <= 0)
        bad("timeout must be positive");
}

VerbsConfig verbs_config_from(const topo::RoceConn &conn) {
    VerbsConfig c;
    c.local_ip = conn.child_ip;
    c.switch_ip = conn.parent_ip;
    c.remote_qpn = conn.parent_qpn;
    c.sq_psn = conn.up_base;
    c.rq_psn = conn.down_base;
    return c;
}

__be32 imm_to_wire(uint32_t imm) {
    return htonl(imm);
}
uint32_t imm_from_wire(__be32 imm) {
    return ntohl(imm);
}

bool imm_same_collective(uint32_t a, uint32_t b) {
    return roce_imm_prim(a) == roce_imm_prim(b) && roce_imm_op(a) == roce_imm_op(b) &&
           roce_imm_dtype(a) == roce_imm_dtype(b);
}

ibv_gid ipv4_mapped_gid(const std::string &ip, const char *what) {
    uint32_t a = parse_ipv4(ip, what);
    ibv_gid g{};
    g.raw[10] = 0xff;
    g.raw[11] = 0xff;
    std::memcpy(&g.raw[12], &a, 4);
    return g;
}

std::string gid_to_string(const ibv_gid &g) {
    char s[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, g.raw, s, sizeof(s));
    return s;
}

uint32_t mtu_bytes(ibv_mtu m) {
    switch (m) {
    case IBV_MTU_256:
        return 256;
    case IBV_MTU_512:
        return 512;
    case IBV_MTU_1024:
        return 1024;
    case IBV_MTU_2048:
        return 2048;
    case IBV_MTU_4096:
        return 4096;
    }
    return 0;
}

ibv_mtu path_mtu_for(uint32_t max_payload, ibv_mtu active) {
    if (mtu_bytes(active) == 0)
        throw std::invalid_argument(fmt::format("verbs: bad active MTU {}", int(active)));
    // The protocol's path MTU is 2048; a smaller port still works if every
    // SEND fits in one packet.
    ibv_mtu m = std::min(active, IBV_MTU_2048);
    if (mtu_bytes(m) < max_payload)
        throw std::invalid_argument(fmt::format(
            "verbs: max_payload {} B needs a path MTU of at least {} B, the port's active MTU "
            "is {} B (rxe: raise the netdev MTU, 2128 gives 2048) or send fewer elements "
            "per packet",
            max_payload, max_payload, mtu_bytes(active)));
    return m;
}

QpTransition init_attr(const VerbsPath &path) {
    QpTransition t;
    t.attr.qp_state = IBV_QPS_INIT;
    t.attr.pkey_index = 0;
    t.attr.port_num = path.port;
    t.attr.qp_access_flags = 0; // SENDs only: no remote access to our memory
    t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    return t;
}

QpTransition rtr_attr(const VerbsConfig &cfg, const VerbsPath &path) {
    if (path.sgid_index > 0xff)
        throw std::invalid_argument(
            fmt::format("verbs: sgid index {} does not fit the GRH (<= 255)", path.sgid_index));
    QpTransition t;
    ibv_qp_attr &a = t.attr;
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = path.mtu;
    a.dest_qp_num = cfg.remote_qpn & ROCE_QPN_MASK;
    a.rq_psn = cfg.rq_psn & ROCE_PSN_MASK;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = kMinRnrTimer;
    // RoCEv2: the GRH is the IP header; the kernel resolves the switch's MAC
    // from the neighbour table of the source GID's netdev.
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = ipv4_mapped_gid(cfg.switch_ip, "switch_ip");
    a.ah_attr.grh.sgid_index = uint8_t(path.sgid_index);
    a.ah_attr.grh.hop_limit = cfg.hop_limit;
    a.ah_attr.grh.traffic_class = cfg.traffic_class;
    a.ah_attr.grh.flow_label = 0;
    a.ah_attr.dlid = 0;
    a.ah_attr.sl = 0;
    a.ah_attr.src_path_bits = 0;
    a.ah_attr.port_num = path.port;
    t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    return t;
}

QpTransition rts_attr(const VerbsConfig &cfg) {
    QpTransition t;
    ibv_qp_attr &a = t.attr;
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = cfg.sq_psn & ROCE_PSN_MASK;
    a.timeout = cfg.ack_timeout;
    a.retry_cnt = cfg.retry_cnt;
    a.rnr_retry = cfg.rnr_retry;
    a.max_rd_atomic = 1;
    t.mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
             IBV_QP_MAX_QP_RD_ATOMIC;
    return t;
}

VerbsWindow::VerbsWindow(uint32_t window, uint32_t sq_depth, uint32_t signal_every)
    : window_(window), sq_depth_(sq_depth), signal_every_(signal_every) {
    // Any signal_every consecutive WRs hold a signaled one, so a full send
    // queue always has a completion coming that frees part of it.
    if (window == 0 || signal_every == 0 || sq_depth < signal_every)
        throw std::invalid_argument(
            fmt::format("verbs: window {}, send queue {}, signal every {}: need window >= 1 and "
                        "1 <= signal_every <= send queue",
                        window, sq_depth, signal_every));
}

void VerbsWindow::start(uint64_t n_packets) {
    if (!done())
        throw std::logic_error("verbs: a run started before the previous one finished");
    n_ = n_packets;
    next_ = results_ = 0;
}

bool VerbsWindow::can_post() const {
    return next_ < n_ && next_ - results_ < window_ && seq_ - sq_done_ < sq_depth_;
}

bool VerbsWindow::signal_next() const {
    return seq_ + 1 - last_signaled_ >= signal_every_ || next_ + 1 == n_ ||
           seq_ + 1 - sq_done_ == sq_depth_;
}

VerbsWindow::Post VerbsWindow::post() {
    if (!can_post())
        throw std::logic_error("verbs: post beyond the window or the send queue");
    Post p{next_, seq_, signal_next()};
    if (p.signaled)
        last_signaled_ = seq_ + 1;
    ++next_;
    ++seq_;
    return p;
}

void VerbsWindow::send_done(uint64_t seq) {
    if (seq >= seq_)
        throw std::logic_error(fmt::format("verbs: completion of send {} never posted", seq));
    sq_done_ = std::max(sq_done_, seq + 1);
}

uint64_t VerbsWindow::result() {
    if (results_ >= next_)
        throw std::logic_error(
            fmt::format("verbs: a result arrived for packet {} of the run, of which {} are sent",
                        results_, next_));
    return results_++;
}

// ---- device --------------------------------------------------------------

VerbsDevice::VerbsDevice(const VerbsConfig &cfg) {
    DeviceList devs;
    if (!devs.list || devs.n == 0)
        throw std::runtime_error("verbs: " + no_device_reason(devs));
    const bool auto_gid = cfg.gid_index == kVerbsGidAuto;
    std::optional<ibv_gid> want;
    if (!cfg.local_ip.empty())
        want = ipv4_mapped_gid(cfg.local_ip, "local_ip");

    std::vector<std::string> seen; // for the error when nothing matches
    ibv_port_attr chosen_port{};
    for (int d = 0; d < devs.n && !ctx_; ++d) {
        const char *dname = ibv_get_device_name(devs.list[d]);
        if (!cfg.device.empty() && cfg.device != dname)
            continue;
        ibv_context *ctx = ibv_open_device(devs.list[d]);
        if (!ctx) {
            if (!cfg.device.empty())
                throw_errno(errno, fmt::format("verbs: ibv_open_device {}", dname));
            seen.push_back(fmt::format("{}: cannot open ({})", dname, std::strerror(errno)));
            continue;
        }
        ibv_device_attr dattr{};
        if (int e = ibv_query_device(ctx, &dattr)) {
            ibv_close_device(ctx);
            throw_errno(e, fmt::format("verbs: ibv_query_device {}", dname));
        }
        for (uint32_t p = 1; p <= dattr.phys_port_cnt && !ctx_; ++p) {
            if (cfg.port && p != cfg.port)
                continue;
            ibv_port_attr pattr{};
            if (int e = ibv_query_port(ctx, uint8_t(p), &pattr)) {
                ibv_close_device(ctx);
                throw_errno(e, fmt::format("verbs: ibv_query_port {} port {}", dname, p));
            }
            if (pattr.link_layer != IBV_LINK_LAYER_ETHERNET) {
                seen.push_back(fmt::format("{} port {}: not Ethernet", dname, p));
                continue;
            }
            uint32_t first = auto_gid ? 0 : cfg.gid_index;
            uint32_t last = auto_gid ? uint32_t(pattr.gid_tbl_len) : cfg.gid_index + 1;
            for (uint32_t i = first; i < last; ++i) {
                ibv_gid_entry e{};
                if (ibv_query_gid_ex(ctx, p, i, &e, 0) != 0)
                    continue; // an empty slot of the table
                bool v2 = e.gid_type == IBV_GID_TYPE_ROCE_V2;
                bool ip_ok = !want || std::memcmp(e.gid.raw, want->raw, 16) == 0;
                if (v2 && ip_ok) {
                    ctx_ = ctx;
                    name_ = dname;
                    port_ = uint8_t(p);
                    gid_index_ = i;
                    gid_ = e.gid;
                    chosen_port = pattr;
                    break;
                }
                if (v2 || !auto_gid)
                    seen.push_back(fmt::format("{} port {} gid {}: {} {}", dname, p, i,
                                               gid_type_name(e.gid_type), gid_to_string(e.gid)));
            }
        }
        if (!ctx_)
            ibv_close_device(ctx);
    }
    if (!ctx_) {
        std::vector<std::string> names;
        for (int d = 0; d < devs.n; ++d)
            names.push_back(ibv_get_device_name(devs.list[d]));
        if (!cfg.device.empty() && std::find(names.begin(), names.end(), cfg.device) == names.end())
            throw std::runtime_error(fmt::format("verbs: no RDMA device '{}'; there are: {}",
                                                 cfg.device, fmt::join(names, ", ")));
        std::string which = auto_gid ? "a RoCEv2 GID for " + cfg.local_ip
                                     : fmt::format("a RoCEv2 GID at index {}{}", cfg.gid_index,
                                                   want ? " holding " + cfg.local_ip : "");
        if (cfg.port)
            which += fmt::format(" on port {}", cfg.port);
        if (seen.size() > kMaxSeen) {
            seen.resize(kMaxSeen);
            seen.push_back("...");
        }
        throw std::runtime_error(fmt::format(
            "verbs: {} has {} (found: {})",
            cfg.device.empty() ? fmt::format("no RDMA device ({})", fmt::join(names, ", "))
                               : "device " + cfg.device,
            which, seen.empty() ? "no RoCEv2 GID" : fmt::format("{}", fmt::join(seen, "; "))));
    }
    active_mtu_ = chosen_port.active_mtu;
    if (chosen_port.state != IBV_PORT_ACTIVE) {
        std::string msg = fmt::format("verbs: {} port {} is {}, not ACTIVE (is its netdev up?)",
                                      name_, port_, ibv_port_state_str(chosen_port.state));
        ibv_close_device(ctx_);
        throw std::runtime_error(msg);
    }
    pd_ = ibv_alloc_pd(ctx_);
    if (!pd_) {
        int e = errno;
        ibv_close_device(ctx_);
        throw_errno(e, fmt::format("verbs: ibv_alloc_pd on {}", name_));
    }
}

VerbsDevice::~VerbsDevice() {
    if (pd_)
        ibv_dealloc_pd(pd_);
    if (ctx_)
        ibv_close_device(ctx_);
}

std::string VerbsDevice::describe() const {
    return fmt::format("{} port {} gid {} ({})", name_, port_, gid_index_, gid_to_string(gid_));
}

// ---- session -------------------------------------------------------------

struct VerbsSession::Impl {
    ibv_comp_channel *channel = nullptr;
    ibv_cq *cq = nullptr;
    ibv_qp *qp = nullptr;
    ibv_mr *mr = nullptr;
    std::byte *mem = nullptr;
    size_t buf_stride = 0; ///< bytes between buffers: max_payload, cache-line rounded
    uint32_t sq_depth = 0, rq_depth = 0;
    VerbsPath path;
    VerbsWindow win;
    uint64_t recv_seq = 0; ///< receive completions taken, ever
    unsigned unacked_events = 0;

    std::vector<uint32_t> imms; ///< ImmDt of the packets without a result, by packet % window

    Impl(uint32_t window, uint32_t sq, uint32_t signal_every)
        : win(window, sq, signal_every), imms(window) {}
    ~Impl() {
        if (qp)
            ibv_destroy_qp(qp);
        if (cq) {
            // ibv_destroy_cq waits for every event it handed out to be acked.
            if (unacked_events)
                ibv_ack_cq_events(cq, unacked_events);
            ibv_destroy_cq(cq);
        }
        if (channel)
            ibv_destroy_comp_channel(channel);
        if (mr)
            ibv_dereg_mr(mr);
        std::free(mem);
    }

    std::byte *send_buf(uint64_t seq) const { return mem + (seq % sq_depth) * buf_stride; }
    std::byte *recv_buf(uint32_t slot) const {
        return mem + (size_t(sq_depth) + slot) * buf_stride;
    }
};

bool VerbsSession::available(std::string *why) {
    DeviceList devs;
    if (devs.list && devs.n > 0)
        return true;
    if (why)
        *why = no_device_reason(devs);
    return false;
}

VerbsSession::VerbsSession(VerbsConfig cfg) : cfg_(std::move(cfg)) {
    cfg_.validate();
    dev_ = std::make_unique<VerbsDevice>(cfg_);
    const uint32_t sq = cfg_.window + cfg_.signal_every;
    impl_ = std::make_unique<Impl>(cfg_.window, sq, cfg_.signal_every);
    Impl &m = *impl_;
    m.sq_depth = sq;
    m.rq_depth = cfg_.window + kRecvMargin;
    m.path = VerbsPath{dev_->port(), dev_->gid_index(),
                       path_mtu_for(cfg_.max_payload, dev_->active_mtu())};
    ibv_context *ctx = dev_->context();
    const std::string where = dev_->describe();

    ibv_device_attr dattr{};
    if (int e = ibv_query_device(ctx, &dattr))
        throw_errno(e, "verbs: ibv_query_device " + where);
    const uint32_t cqe = m.sq_depth + m.rq_depth;
    if (m.sq_depth > uint32_t(dattr.max_qp_wr) || m.rq_depth > uint32_t(dattr.max_qp_wr) ||
        cqe > uint32_t(dattr.max_cqe))
        throw std::invalid_argument(fmt::format(
            "verbs: window {} needs {} send and {} receive WRs and {} CQEs; {} allows {} WRs, "
            "{} CQEs",
            cfg_.window, m.sq_depth, m.rq_depth, cqe, dev_->name(), dattr.max_qp_wr,
            dattr.max_cqe));

    m.channel = ibv_create_comp_channel(ctx);
    if (!m.channel)
        throw_errno(errno, "verbs: ibv_create_comp_channel on " + where);
    // Non-blocking, so a spurious wakeup never blocks in ibv_get_cq_event.
    int fl = fcntl(m.channel->fd, F_GETFL);
    if (fl < 0 || fcntl(m.channel->fd, F_SETFL, fl | O_NONBLOCK) < 0)
        throw_errno(errno, "verbs: making the completion channel non-blocking");
    m.cq = ibv_create_cq(ctx, int(cqe), nullptr, m.channel, 0);
    if (!m.cq)
        throw_errno(errno, fmt::format("verbs: ibv_create_cq ({} entries) on {}", cqe, where));

    ibv_qp_init_attr qia{};
    qia.send_cq = m.cq;
    qia.recv_cq = m.cq;
    qia.qp_type = IBV_QPT_RC;
    qia.sq_sig_all = 0;
    qia.cap.max_send_wr = m.sq_depth;
    qia.cap.max_recv_wr = m.rq_depth;
    qia.cap.max_send_sge = 1;
    qia.cap.max_recv_sge = 1;
    m.qp = ibv_create_qp(dev_->pd(), &qia);
    if (!m.qp)
        throw_errno(errno, fmt::format("verbs: ibv_create_qp (RC, {} send / {} receive WRs) on {}",
                                       m.sq_depth, m.rq_depth, where));

    m.buf_stride = std::max<size_t>(64, (size_t(cfg_.max_payload) + 63) / 64 * 64);
    size_t bytes = m.buf_stride * (m.sq_depth + m.rq_depth);
    bytes = (bytes + 4095) / 4096 * 4096;
    m.mem = static_cast<std::byte *>(std::aligned_alloc(4096, bytes));
    if (!m.mem)
        throw std::bad_alloc();
    std::memset(m.mem, 0, bytes);
    m.mr = ibv_reg_mr(dev_->pd(), m.mem, bytes, IBV_ACCESS_LOCAL_WRITE);
    if (!m.mr)
        throw_errno(errno, fmt::format("verbs: ibv_reg_mr ({} B) on {}", bytes, where));

    QpTransition init = init_attr(m.path);
    if (int e = ibv_modify_qp(m.qp, &init.attr, init.mask))
        throw_errno(e, fmt::format("verbs: ibv_modify_qp RESET->INIT of QP 0x{:06x} on {}",
                                   m.qp->qp_num, where));

    // Receives before RTR: a result may come as soon as the switch has our
    // first packet, and an RNR NAK is nothing the switch handles.
    for (uint32_t s = 0; s < m.rq_depth; ++s) {
        ibv_sge sge{reinterpret_cast<uintptr_t>(m.recv_buf(s)), cfg_.max_payload, m.mr->lkey};
        ibv_recv_wr wr{};
        wr.wr_id = kRecvTag | s;
        wr.sg_list = cfg_.max_payload ? &sge : nullptr;
        wr.num_sge = cfg_.max_payload ? 1 : 0;
        ibv_recv_wr *bad = nullptr;
        if (int e = ibv_post_recv(m.qp, &wr, &bad))
            throw_errno(e, "verbs: ibv_post_recv on " + where);
    }
}

VerbsSession::~VerbsSession() = default;

uint32_t VerbsSession::qp_num() const {
    return impl_->qp->qp_num;
}

std::string VerbsSession::describe() const {
    return fmt::format("{} qpn 0x{:06x} -> {} qpn 0x{:06x}", dev_->describe(), qp_num(),
                       cfg_.switch_ip, cfg_.remote_qpn);
}

void VerbsSession::connect() {
    if (connected_)
        return;
    Impl &m = *impl_;
    QpTransition rtr = rtr_attr(cfg_, m.path);
    if (int e = ibv_modify_qp(m.qp, &rtr.attr, rtr.mask))
        throw_errno(e, fmt::format("verbs: ibv_modify_qp INIT->RTR of {} (rq_psn 0x{:06x}, path "
                                   "MTU {}; the switch's IP needs a neighbour entry on the "
                                   "GID's netdev)",
                                   describe(), cfg_.rq_psn, mtu_bytes(m.path.mtu)));
    QpTransition rts = rts_attr(cfg_);
    if (int e = ibv_modify_qp(m.qp, &rts.attr, rts.mask))
        throw_errno(e, fmt::format("verbs: ibv_modify_qp RTR->RTS of {} (sq_psn 0x{:06x})",
                                   describe(), cfg_.sq_psn));
    connected_ = true;
}

void VerbsSession::post_ready(RocePackets &call, VerbsRunStats &st) {
    Impl &m = *impl_;
    auto can_post = [&] { return m.win.can_post() && call.ready(m.win.posted()); };
    // Every packet the window, the send queue and the collective allow
    // (float32 data waits for its agreed exponent), one doorbell per batch.
    while (can_post()) {
        ibv_send_wr wrs[kPostBatch];
        ibv_sge sges[kPostBatch];
        int k = 0;
        for (; k < kPostBatch && can_post(); ++k) {
            VerbsWindow::Post p = m.win.post();
            std::byte *buf = m.send_buf(p.seq);
            uint32_t imm = 0;
            const size_t room = cfg_.max_payload / 4;
            const size_t elems = call.build(p.idx, std::span<std::byte>(buf, 4 * room), imm);
            if (elems > room)
                throw std::length_error(fmt::format(
                    "verbs: packet {} of the run has {} elements, max_payload {} B holds {}",
                    p.idx, elems, cfg_.max_payload, room));
            const uint32_t len = uint32_t(4 * elems);
            m.imms[p.idx % m.imms.size()] = imm;
            sges[k] = ibv_sge{reinterpret_cast<uintptr_t>(buf), len, m.mr->lkey};
            ibv_send_wr &wr = wrs[k];
            wr = ibv_send_wr{};
            wr.wr_id = p.seq; // = the session's idx: one WR per packet
            wr.opcode = IBV_WR_SEND_WITH_IMM;
            wr.imm_data = imm_to_wire(imm);
            wr.send_flags = p.signaled ? IBV_SEND_SIGNALED : 0;
            wr.sg_list = len ? &sges[k] : nullptr;
            wr.num_sge = len ? 1 : 0;
            if (k > 0)
                wrs[k - 1].next = &wr;
            st.packets_sent++;
            st.bytes_sent += len;
        }
        ibv_send_wr *bad = nullptr;
        if (int e = ibv_post_send(m.qp, wrs, &bad))
            throw_errno(e, fmt::format("verbs: ibv_post_send of idx {} on {}",
                                       bad ? bad->wr_id : wrs[0].wr_id, describe()));
    }
}

int VerbsSession::poll_wait(ibv_wc *wc, std::chrono::steady_clock::time_point give_up,
                            VerbsRunStats &st) {
    Impl &m = *impl_;
    auto poll_cq = [&] {
        int n = ibv_poll_cq(m.cq, kPollBatch, wc);
        if (n < 0)
            throw std::runtime_error("verbs: ibv_poll_cq failed on " + describe());
        return n;
    };
    const auto spin_until = Clock::now() + cfg_.spin;
    for (;;) {
        if (int n = poll_cq())
            return n;
        if (cfg_.stop && cfg_.stop->load(std::memory_order_relaxed))
            throw VerbsInterrupted("verbs: interrupted on " + describe());
        auto now = Clock::now();
        if (now >= give_up)
            return 0;
        if (now < spin_until)
            continue;
        if (int e = ibv_req_notify_cq(m.cq, 0))
            throw_errno(e, "verbs: ibv_req_notify_cq on " + describe());
        // A completion between the last poll and the arming raises no
        // event: look once more before sleeping.
        if (int n = poll_cq())
            return n;
        st.cq_sleeps++;
        auto left = std::chrono::ceil<std::chrono::milliseconds>(give_up - now);
        pollfd pfd{m.channel->fd, POLLIN, 0};
        int r = ::poll(&pfd, 1, int(std::clamp<int64_t>(left.count(), 1, 1000)));
        if (r < 0 && errno != EINTR)
            throw_errno(errno, "verbs: poll on the completion channel of " + describe());
        ibv_cq *ev_cq = nullptr;
        void *ev_ctx = nullptr;
        if (r > 0 && ibv_get_cq_event(m.channel, &ev_cq, &ev_ctx) == 0 &&
            ++m.unacked_events >= kEventAckBatch) {
            ibv_ack_cq_events(m.cq, m.unacked_events);
            m.unacked_events = 0;
        }
    }
}

std::string VerbsSession::completion_error(const ibv_wc &wc) const {
    const Impl &m = *impl_;
    const bool recv = wc.wr_id & kRecvTag;
    std::string what;
    const char *hint = "";
    if (recv) {
        uint64_t idx = idx_base_ + m.win.results();
        what = fmt::format("the receive for idx {} (down PSN 0x{:06x})", idx,
                           verbs_psn(cfg_.rq_psn, idx));
    } else {
        what = fmt::format("the SEND of idx {} (up PSN 0x{:06x})", wc.wr_id,
                           verbs_psn(cfg_.sq_psn, wc.wr_id));
    }
    switch (wc.status) {
    case IBV_WC_RETRY_EXC_ERR:
        hint = ": the switch did not ACK it through every retry (is this QP's QPN the "
               "connection's child QPN on the switch, is the switch reachable?)";
        break;
    case IBV_WC_LOC_LEN_ERR:
        hint = recv ? ": a result longer than max_payload" : "";
        break;
    case IBV_WC_RNR_RETRY_EXC_ERR:
        hint = ": the switch answered RNR NAK through every retry";
        break;
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
        hint = ": the switch NAKed it as invalid";
        break;
    case IBV_WC_WR_FLUSH_ERR:
        hint = ": the QP had gone to the error state";
        break;
    default:
        break;
    }
    return fmt::format("verbs: {}: {} completed with '{}' (status {}, vendor error 0x{:x}){}",
                       describe(), what, ibv_wc_status_str(wc.status), int(wc.status),
                       wc.vendor_err, hint);
}

void VerbsSession::take_completion(const ibv_wc &wc, RocePackets &call, VerbsRunStats &st) {
    Impl &m = *impl_;
    if (wc.status != IBV_WC_SUCCESS)
        throw std::runtime_error(completion_error(wc));
    if (!(wc.wr_id & kRecvTag)) {
        m.win.send_done(wc.wr_id);
        st.send_completions++;
        return;
    }
    // RC: receive WRs complete in the order they were posted and SENDs land
    // in PSN order, so this is the next slot and the next idx.
    const uint32_t slot = uint32_t(m.recv_seq % m.rq_depth);
    const uint64_t idx = idx_base_ + m.win.results();
    if ((wc.wr_id & ~kRecvTag) != slot)
        throw std::runtime_error(
            fmt::format("verbs: {}: receive buffer {} completed where {} was next", describe(),
                        wc.wr_id & ~kRecvTag, slot));
    if (m.win.results() >= m.win.posted())
        throw std::runtime_error(fmt::format(
            "verbs: {}: a result (down PSN 0x{:06x}) came for idx {}, which is not sent yet: "
            "the switch's down stream is ahead (a stale connection? reset the job)",
            describe(), verbs_psn(cfg_.rq_psn, idx), idx));
    const uint64_t i = m.win.results(); // packet of the run
    const uint32_t imm = m.imms[i % m.imms.size()];
    if (wc.wc_flags & IBV_WC_WITH_IMM) {
        uint32_t got = imm_from_wire(wc.imm_data);
        if (!imm_same_collective(got, imm))
            throw std::runtime_error(fmt::format(
                "verbs: {}: the result of idx {} carries ImmDt 0x{:08x} (primitive {}, op {}, "
                "dtype {}), this collective sent 0x{:08x} (primitive {}, op {}, dtype {}): "
                "host and switch disagree on the idx",
                describe(), idx, got, roce_imm_prim(got), roce_imm_op(got), roce_imm_dtype(got),
                imm, roce_imm_prim(imm), roce_imm_op(imm), roce_imm_dtype(imm)));
    }
    const uint64_t want = 4 * uint64_t(call.result_elems(i));
    if (wc.byte_len != want)
        throw std::runtime_error(fmt::format(
            "verbs: {}: the result of idx {} (down PSN 0x{:06x}) has {} B of payload, this "
            "collective expects {} B",
            describe(), idx, verbs_psn(cfg_.rq_psn, idx), wc.byte_len, want));
    m.win.result();
    call.consume(i, std::span<const std::byte>(m.recv_buf(slot), wc.byte_len));
    st.results++;
    st.bytes_received += wc.byte_len;

    ibv_sge sge{reinterpret_cast<uintptr_t>(m.recv_buf(slot)), cfg_.max_payload, m.mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = kRecvTag | slot;
    wr.sg_list = cfg_.max_payload ? &sge : nullptr;
    wr.num_sge = cfg_.max_payload ? 1 : 0;
    ibv_recv_wr *bad = nullptr;
    if (int e = ibv_post_recv(m.qp, &wr, &bad))
        throw_errno(e, "verbs: ibv_post_recv on " + describe());
    m.recv_seq++;
}

VerbsRunStats VerbsSession::run(RocePackets &call) {
    const uint64_t n_packets = call.count();
    if (failed_)
        throw std::logic_error("verbs: " + describe() + ": failed earlier; open a new session");
    VerbsRunStats st;
    const auto t0 = Clock::now();
    try {
        connect();
        Impl &m = *impl_;
        m.win.start(n_packets);
        auto last_progress = t0;
        ibv_wc wc[kPollBatch];
        // What came since the last run: send completions, or the error that
        // put the QP in the error state (a SEND never ACKed, say).
        for (int n; (n = ibv_poll_cq(m.cq, kPollBatch, wc)) != 0;) {
            if (n < 0)
                throw std::runtime_error("verbs: ibv_poll_cq failed on " + describe());
            for (int i = 0; i < n; ++i)
                take_completion(wc[i], call, st);
        }
        while (!m.win.done()) {
            post_ready(call, st);
            int n = poll_wait(wc, last_progress + cfg_.timeout, st);
            if (n == 0) {
                const uint64_t idx = idx_base_ + m.win.results();
                throw VerbsTimeout(
                    fmt::format("verbs: no completion for {} ms on {}: waiting for the result of "
                                "idx {} (down PSN 0x{:06x}); {} of {} packets of this run sent "
                                "(up PSNs 0x{:06x}..), {} results. Does the switch have QPN "
                                "0x{:06x} as this connection's child QPN?",
                                cfg_.timeout.count(), describe(), idx, verbs_psn(cfg_.rq_psn, idx),
                                m.win.posted(), n_packets, verbs_psn(cfg_.sq_psn, idx_base_),
                                m.win.results(), qp_num()),
                    idx);
            }
            last_progress = Clock::now();
            for (int i = 0; i < n; ++i)
                take_completion(wc[i], call, st);
        }
        idx_base_ += n_packets;
    } catch (...) {
        failed_ = true;
        throw;
    }
    st.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return st;
}

} // namespace incxdp::detail
