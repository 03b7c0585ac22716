// SPDX-License-Identifier: BSD-2-Clause
#include <incxdp/capture.h>
#include <incxdp/capture_ctl.h>
#include <incxdp/ctl.h>
#include <incxdp/xdp_prog_maps.h>

#include "pinned_maps.h"
#include "port_util.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fmt/format.h>
#include <xdp/libxdp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <net/if.h>
#include <set>
#include <time.h>

namespace incxdp::ctl {
namespace {

// The capture map reached from an interface's XDP program(s); -1 if none.
int capture_map_of_iface(uint32_t ifindex)
{
    return xdpmaps::map_fd_on_iface(int(ifindex), INCXDP_CAPTURE_MAP, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
}

struct PcapWriter {
    std::FILE *f = nullptr;
    explicit PcapWriter(const std::string &path)
    {
        f = std::fopen(path.c_str(), "wb");
        if (!f)
            throw CtlError(errno_msg(fmt::format("capture: cannot write {}", path), errno));
        struct {
            uint32_t magic = 0xa1b23c4d; // nanosecond timestamps
            uint16_t major = 2, minor = 4;
            int32_t zone = 0;
            uint32_t sigfigs = 0, snaplen = 65535, linktype = 1; // Ethernet
        } hdr;
        std::fwrite(&hdr, sizeof(hdr), 1, f);
        // The file is opened once the perf buffers are: with its header on
        // disk it tells whoever started the capture that it listens.
        std::fflush(f);
    }
    ~PcapWriter()
    {
        if (f)
            std::fclose(f);
    }
    void write(const void *data, uint32_t len)
    {
        timespec ts{};
        clock_gettime(CLOCK_REALTIME, &ts);
        uint32_t rec[4] = {uint32_t(ts.tv_sec), uint32_t(ts.tv_nsec), len, len};
        std::fwrite(rec, sizeof(rec), 1, f);
        std::fwrite(data, len, 1, f);
    }
};

struct Sink {
    PcapWriter *out;
    CaptureResult *res;
    std::set<uint32_t> *ifindexes;
};

void on_sample(void *ctx, int, void *data, uint32_t size)
{
    auto *s = static_cast<Sink *>(ctx);
    if (size < sizeof(incxdp_capture_meta))
        return;
    incxdp_capture_meta m;
    std::memcpy(&m, data, sizeof(m));
    // The engine runs on every port of a switch and shares one map: keep
    // only the interfaces asked for.
    if (!s->ifindexes->count(m.ifindex))
        return;
    uint32_t len = std::min<uint32_t>(m.len, size - uint32_t(sizeof(m)));
    s->out->write(static_cast<const char *>(data) + sizeof(m), len);
    s->res->frames++;
}

void on_lost(void *ctx, int, unsigned long long n)
{
    static_cast<Sink *>(ctx)->res->lost += n;
}

std::vector<std::string> all_ifaces()
{
    std::vector<std::string> out;
    if (struct if_nameindex *ni = ::if_nameindex()) {
        for (auto *p = ni; p->if_index; ++p)
            if (std::string(p->if_name) != "lo")
                out.emplace_back(p->if_name);
        if_freenameindex(ni);
    }
    return out;
}

} // namespace

namespace {

// Current XDP program id on an interface (the dispatcher's or the program's).
uint32_t prog_id_of(uint32_t ifindex)
{
    uint32_t id = 0;
    bpf_xdp_query_id(int(ifindex), 0, &id);
    return id;
}

// The perf buffers of every capture map the interfaces lead to. Programs
// come and go while we capture (hostlib's AF_XDP transport replaces
// incxdp_pass with incxdp_xsk when it opens), so this is re-resolved while
// running and new maps are added; a buffer whose program went away simply
// stays quiet.
class Buffers {
  public:
    Buffers(Sink &sink) : sink_(sink) {}

    // Returns true if the interface leads to a capture map now.
    bool attach(uint32_t ifindex)
    {
        prog_of_[ifindex] = prog_id_of(ifindex);
        Fd fd(capture_map_of_iface(ifindex));
        if (!fd)
            return false;
        bpf_map_info mi{};
        uint32_t mlen = sizeof(mi);
        bpf_obj_get_info_by_fd(fd.get(), &mi, &mlen);
        if (!map_ids_.insert(mi.id).second)
            return true;
        perf_buffer *pb = perf_buffer__new(fd.get(), 1024 /* pages per CPU: 4 MiB */, on_sample, on_lost, &sink_, nullptr);
        if (long err = libbpf_get_error(pb))
            throw CtlError(errno_msg("capture: perf_buffer__new on " INCXDP_CAPTURE_MAP, int(-err)));
        bufs_.emplace_back(pb, perf_buffer__free);
        maps_.push_back(std::move(fd));
        return true;
    }

    void refresh()
    {
        for (auto &[ifindex, id] : prog_of_)
            if (prog_id_of(ifindex) != id)
                attach(ifindex);
    }

    void poll(int ms)
    {
        for (auto &b : bufs_)
            perf_buffer__poll(b.get(), bufs_.size() > 1 ? std::max(1, ms / int(bufs_.size())) : ms);
    }

    void drain()
    {
        for (auto &b : bufs_)
            perf_buffer__consume(b.get());
    }

    bool empty() const { return bufs_.empty(); }

  private:
    Sink &sink_;
    std::map<uint32_t, uint32_t> prog_of_;
    std::set<uint32_t> map_ids_;
    std::vector<Fd> maps_;
    std::vector<std::unique_ptr<perf_buffer, decltype(&perf_buffer__free)>> bufs_;
};

} // namespace

CaptureResult capture(const CaptureOptions &opts, const std::atomic<bool> &stop)
{
    CaptureResult res;
    bool explicit_ifaces = !opts.ifaces.empty();
    std::vector<std::string> names = explicit_ifaces ? opts.ifaces : all_ifaces();
    std::set<uint32_t> ifindexes;
    std::unique_ptr<PcapWriter> out;
    Sink sink{nullptr, &res, &ifindexes};
    Buffers bufs(sink);
    for (const auto &name : names) {
        uint32_t ifindex = ifindex_of(name);
        if (!bufs.attach(ifindex)) {
            if (explicit_ifaces)
                throw CtlError(fmt::format("capture: {} runs no incxdp XDP program with a capture map "
                                           "(incxdp_ingress, incxdp_xsk or incxdp_pass)",
                                           name));
            continue;
        }
        ifindexes.insert(ifindex);
        res.ifaces.push_back(name);
    }
    if (bufs.empty())
        throw CtlError("capture: no interface here runs an incxdp XDP program");

    out = std::make_unique<PcapWriter>(opts.file);
    sink.out = out.get();
    auto start = std::chrono::steady_clock::now();
    auto last_refresh = start;
    while (!stop.load()) {
        bufs.poll(10);
        auto now = std::chrono::steady_clock::now();
        if (now - last_refresh > std::chrono::milliseconds(20)) {
            bufs.refresh();
            last_refresh = now;
        }
        if (opts.count && res.frames >= opts.count)
            break;
        if (opts.seconds > 0 && std::chrono::duration<double>(now - start).count() >= opts.seconds)
            break;
    }
    bufs.drain();
    std::fflush(out->f);
    return res;
}

} // namespace incxdp::ctl
