// SPDX-License-Identifier: BSD-2-Clause
#include "ref_switch.h"

#include <incxdp/proto.h>
#include <incxdp/switchml.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <system_error>

namespace incxdp::test {
namespace {

sockaddr_in loopback(uint16_t port) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

int bound_socket(uint16_t port, uint16_t &actual) {
    int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        throw std::system_error(errno, std::generic_category(), "ref switch: socket");
    int big = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big));
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
    sockaddr_in a = loopback(port);
    if (::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) < 0) {
        int err = errno;
        ::close(fd);
        throw std::system_error(err, std::generic_category(), "ref switch: bind");
    }
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len);
    actual = ntohs(a.sin_port);
    return fd;
}

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

int32_t be32_at(const uint8_t *p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return int32_t(ntohl(v));
}

void put_be32(uint8_t *p, int32_t v) {
    uint32_t n = htonl(uint32_t(v));
    std::memcpy(p, &n, 4);
}

int32_t combine(uint8_t op, int32_t a, int32_t b) {
    switch (op) {
    case INCXDP_OP_MAX:
        return std::max(a, b);
    case INCXDP_OP_MIN:
        return std::min(a, b);
    default:
        return int32_t(uint32_t(a) + uint32_t(b)); // wrapping sum
    }
}

constexpr uint64_t kLateDelay = 64; // datagrams before a replayed copy goes out

} // namespace

uint16_t free_udp_port() {
    uint16_t port = 0;
    ::close(bound_socket(0, port));
    return port;
}

RefSwitch::RefSwitch(RefSwitchConfig cfg) : cfg_(std::move(cfg)), slots_(cfg_.slots) {
    fd_ = bound_socket(0, port_);
    thread_ = std::thread([this] { loop(); });
}

RefSwitch::~RefSwitch() {
    stop_ = true;
    thread_.join();
    ::close(fd_);
}

void RefSwitch::bump(uint64_t RefSwitchCounters::*field, uint64_t by) {
    std::lock_guard lock(mu_);
    counters_.*field += by;
}

RefSwitchCounters RefSwitch::counters() const {
    std::lock_guard lock(mu_);
    return counters_;
}

bool RefSwitch::chance(double p) {
    if (p <= 0)
        return false;
    uint64_t r = splitmix64(cfg_.seed * 0x1000193ull + draws_++);
    return double(r >> 11) * 0x1.0p-53 < p;
}

void RefSwitch::loop() {
    std::vector<uint8_t> buf(65536);
    while (!stop_) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 20) <= 0)
            continue;
        sockaddr_in src{};
        socklen_t slen = sizeof(src);
        ssize_t n =
            ::recvfrom(fd_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr *>(&src), &slen);
        if (n < 0)
            continue;
        on_datagram(buf.data(), size_t(n), ntohs(src.sin_port));
        // Replay result copies whose time has come: late duplicates.
        for (size_t i = 0; i < late_.size();) {
            if (late_[i].due <= received_) {
                auto a = loopback(late_[i].port);
                ::sendto(fd_, late_[i].pkt.data(), late_[i].pkt.size(), 0,
                         reinterpret_cast<sockaddr *>(&a), sizeof(a));
                late_.erase(late_.begin() + ptrdiff_t(i));
                bump(&RefSwitchCounters::replayed);
            } else {
                ++i;
            }
        }
    }
}

void RefSwitch::on_datagram(const uint8_t *p, size_t len, uint16_t src_port) {
    ++received_;
    bump(&RefSwitchCounters::rx);
    auto it = std::find(cfg_.worker_ports.begin(), cfg_.worker_ports.end(), src_port);
    if (it == cfg_.worker_ports.end()) {
        bump(&RefSwitchCounters::unknown_sender);
        return;
    }
    if (chance(cfg_.drop)) {
        bump(&RefSwitchCounters::lost);
        return;
    }
    uint32_t rank = uint32_t(it - cfg_.worker_ports.begin());
    if (cfg_.wire == Wire::Native)
        on_native(p, len, rank);
    else
        on_switchml(p, len, rank);
}

void RefSwitch::on_native(const uint8_t *p, size_t len, uint32_t rank) {
    incxdp_hdr h;
    uint32_t n = uint32_t(cfg_.worker_ports.size());
    if (len < sizeof(h)) {
        bump(&RefSwitchCounters::malformed);
        return;
    }
    std::memcpy(&h, p, sizeof(h));
    uint16_t slotf = ntohs(h.slot), nelems = ntohs(h.nelems);
    uint32_t idx = slotf & INCXDP_SLOT_INDEX_MASK;
    if (h.magic != INCXDP_MAGIC || incxdp_hdr_version(&h) != INCXDP_VERSION ||
        incxdp_hdr_type(&h) != INCXDP_MSG_DATA || ntohl(h.job) != cfg_.job ||
        ntohs(h.nworkers) != n || ntohs(h.rank) != rank || idx >= cfg_.slots ||
        nelems % INCXDP_ELEM_QUANTUM || nelems > INCXDP_MAX_ELEMS || h.op >= INCXDP_OP_COUNT ||
        len < sizeof(h) + 4 * size_t(nelems)) {
        bump(&RefSwitchCounters::malformed);
        return;
    }
    int s = (slotf & INCXDP_SLOT_SET_BIT) ? 1 : 0;
    Set &set = slots_[idx].set[s];
    Set &other = slots_[idx].set[1 - s];
    uint32_t bit = 1u << rank, round = ntohl(h.round), chunk = ntohl(h.chunk);
    const uint8_t *vals = p + sizeof(h);

    if (set.bitmap & bit) { // retransmission: only reads
        if (set.remaining != 0) {
            bump(&RefSwitchCounters::retx_drop);
        } else if (set.round != round || set.chunk != chunk || set.result.empty()) {
            bump(&RefSwitchCounters::stale);
        } else {
            bump(&RefSwitchCounters::retx_unicast);
            send_copy(set.result, cfg_.worker_ports[rank]);
        }
        return;
    }
    if (set.remaining != 0 &&
        (set.round != round || set.chunk != chunk || set.nelems != nelems || set.op != h.op)) {
        bump(&RefSwitchCounters::mismatch);
        return;
    }
    set.bitmap |= bit;
    other.bitmap &= ~bit;
    if (set.remaining == 0) { // first contribution: write
        set.remaining = n - 1;
        set.round = round;
        set.chunk = chunk;
        set.nelems = nelems;
        set.op = h.op;
        set.exp0 = h.exp;
        set.vals.resize(nelems);
        for (uint32_t i = 0; i < nelems; ++i)
            set.vals[i] = be32_at(vals + 4 * i);
    } else { // later ones: combine
        --set.remaining;
        set.exp0 = std::max(set.exp0, h.exp);
        for (uint32_t i = 0; i < nelems; ++i)
            set.vals[i] = combine(set.op, set.vals[i], be32_at(vals + 4 * i));
    }
    if (set.remaining != 0) {
        bump(&RefSwitchCounters::consumed);
        return;
    }
    incxdp_hdr r = h;
    r.ver_type = uint8_t(INCXDP_VERSION << 4 | INCXDP_MSG_RESULT);
    r.exp = set.exp0;
    set.result.assign(sizeof(r) + 4 * size_t(nelems), 0);
    std::memcpy(set.result.data(), &r, sizeof(r));
    for (uint32_t i = 0; i < nelems; ++i)
        put_be32(set.result.data() + sizeof(r) + 4 * i, set.vals[i]);
    bump(&RefSwitchCounters::completed);
    multicast(set.result);
}

void RefSwitch::on_switchml(const uint8_t *p, size_t len, uint32_t rank) {
    switchml_hdr h;
    uint32_t n = uint32_t(cfg_.worker_ports.size());
    if (len < sizeof(h)) {
        bump(&RefSwitchCounters::malformed);
        return;
    }
    std::memcpy(&h, p, sizeof(h));
    uint16_t pool = ntohs(h.pool_index);
    uint32_t idx = pool & SWITCHML_POOL_INDEX_MASK;
    uint8_t size = switchml_size(&h);
    uint32_t nelems = SWITCHML_ELEMS(size);
    if (switchml_msg_type(&h) != SWITCHML_MSG_UPDATE || h.job_number != (cfg_.job & 0xff) ||
        idx >= cfg_.slots || len < sizeof(h) + 4 * size_t(nelems)) {
        bump(&RefSwitchCounters::malformed);
        return;
    }
    int s = (pool & SWITCHML_POOL_SET_BIT) ? 1 : 0;
    Set &set = slots_[idx].set[s];
    Set &other = slots_[idx].set[1 - s];
    uint32_t bit = 1u << rank;
    const uint8_t *vals = p + sizeof(h);

    if (set.bitmap & bit) { // SwitchML has no round/chunk: unicast if complete
        if (set.remaining != 0 || set.result.empty()) {
            bump(&RefSwitchCounters::retx_drop);
        } else {
            bump(&RefSwitchCounters::retx_unicast);
            send_copy(set.result, cfg_.worker_ports[rank]);
        }
        return;
    }
    if (set.remaining != 0 && set.size != size) {
        bump(&RefSwitchCounters::mismatch);
        return;
    }
    set.bitmap |= bit;
    other.bitmap &= ~bit;
    if (set.remaining == 0) {
        set.remaining = n - 1;
        set.size = size;
        set.exp0 = h.e0;
        set.exp1 = h.e1;
        set.vals.resize(nelems);
        for (uint32_t i = 0; i < nelems; ++i)
            set.vals[i] = be32_at(vals + 4 * i);
    } else {
        --set.remaining;
        set.exp0 = std::max(set.exp0, h.e0);
        set.exp1 = std::max(set.exp1, h.e1);
        for (uint32_t i = 0; i < nelems; ++i)
            set.vals[i] = combine(INCXDP_OP_SUM, set.vals[i], be32_at(vals + 4 * i));
    }
    if (set.remaining != 0) {
        bump(&RefSwitchCounters::consumed);
        return;
    }
    switchml_hdr r = h; // size, job_number, tsi (the completing packet's) echoed
    r.type_size = uint8_t(SWITCHML_MSG_RESULT << 4 | size);
    r.e0 = set.exp0;
    r.e1 = set.exp1;
    set.result.assign(sizeof(r) + 4 * size_t(nelems), 0);
    std::memcpy(set.result.data(), &r, sizeof(r));
    for (uint32_t i = 0; i < nelems; ++i)
        put_be32(set.result.data() + sizeof(r) + 4 * i, set.vals[i]);
    bump(&RefSwitchCounters::completed);
    multicast(set.result);
}

void RefSwitch::send_copy(const std::vector<uint8_t> &pkt, uint16_t port) {
    if (chance(cfg_.drop)) {
        bump(&RefSwitchCounters::lost);
        return;
    }
    int copies = chance(cfg_.dup) ? 2 : 1;
    auto a = loopback(port);
    for (int i = 0; i < copies; ++i)
        ::sendto(fd_, pkt.data(), pkt.size(), 0, reinterpret_cast<sockaddr *>(&a), sizeof(a));
    bump(&RefSwitchCounters::tx, uint64_t(copies));
    if (chance(cfg_.late))
        late_.push_back({received_ + kLateDelay, port, pkt});
}

void RefSwitch::multicast(const std::vector<uint8_t> &pkt) {
    for (uint16_t port : cfg_.worker_ports)
        send_copy(pkt, port);
}

} // namespace incxdp::test
