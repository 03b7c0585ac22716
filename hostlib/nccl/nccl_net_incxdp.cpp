// SPDX-License-Identifier: BSD-2-Clause
// libnccl-net-incxdp.so: NCCL's net plugin (v8 and v9) over the mesh
// endpoint (incxdp/mesh.h). One device per node: the node's endpoint, which
// reaches every mesh node, relayed where there is no direct cable. Host
// memory only. NCCL may call from several proxy threads and the endpoint is
// not thread-safe, so one mutex guards it; no call blocks on the network.
#include "nccl_net.h"

#include "mesh_link.h"

#include <incxdp/mesh.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <dirent.h>

namespace {

using namespace incxdp;

struct State {
    std::mutex mu;
    ncclDebugLogger_t log = nullptr;
    std::unique_ptr<mesh::Endpoint> ep;
};
State &state() {
    static State s;
    return s;
}

void warn(const char *what) {
    if (auto log = state().log)
        log(NCCL_LOG_WARN, NCCL_NET, __FILE__, __LINE__, "NET/incxdp: %s", what);
}

// Every entry point runs its body here: the endpoint's errors become NCCL's
// classes, and no exception crosses into NCCL's C code.
template <typename F> ncclResult_t guarded(F &&body) {
    try {
        std::lock_guard lock(state().mu);
        return body();
    } catch (const mesh::Error &e) {
        warn(e.what());
        switch (e.kind) {
        case mesh::ErrorKind::System:
            return ncclSystemError;
        case mesh::ErrorKind::InvalidUsage:
            return ncclInvalidUsage;
        case mesh::ErrorKind::Internal:
            return ncclInternalError;
        }
        return ncclInternalError;
    } catch (const std::bad_alloc &) {
        warn("out of memory");
        return ncclSystemError;
    } catch (const std::exception &e) {
        // The link's own failures (socket, pinned maps) are std::runtime_error.
        warn(e.what());
        return ncclSystemError;
    } catch (...) {
        warn("unknown exception");
        return ncclInternalError;
    }
}

// Created on first use, so init, devices and getProperties work before the
// mesh daemon runs. Caller holds the mutex.
mesh::Endpoint &endpoint() {
    auto &s = state();
    if (!s.ep)
        s.ep = std::make_unique<mesh::Endpoint>(mesh::Options::from_env());
    return *s.ep;
}

struct SendComm {
    mesh::Comm *c;
};
struct RecvComm {
    mesh::Comm *c;
};
struct ListenComm {
    mesh::Listen *l;
};
// What test() must know that the endpoint's Request does not tell: how
// many sizes to hand back.
struct Req {
    mesh::Request *r;
    int n;
};

// Sum of the speeds of the node's up interfaces (Mbit/s, sysfs); veths
// report none, and count as 10 Gbit/s each.
int node_speed_mbps() {
    long total = 0;
    DIR *d = opendir("/sys/class/net");
    if (!d)
        return 10000;
    while (dirent *e = readdir(d)) {
        std::string n = e->d_name;
        if (n == "." || n == ".." || n == "lo")
            continue;
        std::ifstream op("/sys/class/net/" + n + "/operstate");
        std::string st;
        if (!(op >> st) || st != "up")
            continue;
        std::ifstream sp("/sys/class/net/" + n + "/speed");
        long mbps = 0;
        total += (sp >> mbps) && mbps > 0 ? mbps : 10000;
    }
    closedir(d);
    return int(std::clamp<long>(total, 1000, 1000000));
}

ncclResult_t check_dev(int dev) {
    return dev == 0 ? ncclSuccess : ncclInvalidArgument;
}

ncclResult_t net_init(ncclDebugLogger_t log) {
    return guarded([&] {
        state().log = log;
        return ncclSuccess;
    });
}

ncclResult_t net_devices(int *ndev) {
    if (!ndev)
        return ncclInvalidArgument;
    *ndev = 1;
    return ncclSuccess;
}

template <typename Props> ncclResult_t fill_props(int dev, Props *p) {
    if (!p || check_dev(dev) != ncclSuccess)
        return ncclInvalidArgument;
    return guarded([&] {
        static char name[] = "incxdp-mesh";
        static char pci[] = "";
        std::memset(p, 0, sizeof(*p));
        p->name = name;
        p->pciPath = pci;
        p->guid = state().ep ? state().ep->node_id() : mesh::node_id_of(mesh::local_addresses());
        p->ptrSupport = NCCL_PTR_HOST;
        p->regIsGlobal = 0;
        p->speed = node_speed_mbps();
        p->port = 1;
        p->latency = 0;
        p->maxComms = 65536;
        p->maxRecvs = mesh::kMaxRecvs;
        p->netDeviceType = NCCL_NET_DEVICE_HOST;
        p->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
        return ncclSuccess;
    });
}

ncclResult_t net_props_v8(int dev, ncclNetProperties_v8_t *p) {
    return fill_props(dev, p);
}

ncclResult_t net_props_v9(int dev, ncclNetProperties_v9_t *p) {
    ncclResult_t r = fill_props(dev, p);
    if (r == ncclSuccess) {
        p->forceFlush = 0;
        p->vProps.ndevs = 1;
        p->vProps.devs[0] = dev;
        p->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
        p->maxCollBytes = NCCL_MAX_NET_SIZE_BYTES;
    }
    return r;
}

ncclResult_t net_listen(int dev, void *handle, void **listen_comm) {
    if (!handle || !listen_comm || check_dev(dev) != ncclSuccess)
        return ncclInvalidArgument;
    return guarded([&] {
        auto &ep = endpoint();
        auto lc = std::make_unique<ListenComm>(ListenComm{ep.listen()});
        mesh::Handle h = ep.handle(lc->l);
        static_assert(sizeof(h) <= NCCL_NET_HANDLE_MAXSIZE);
        std::memcpy(handle, h.data(), h.size());
        *listen_comm = lc.release();
        return ncclSuccess;
    });
}

// The endpoint keeps a pending connection in the handle's local part, and
// NCCL calls again with the same handle buffer: copy it back every time.
template <typename DevHandle>
ncclResult_t net_connect(int dev, void *handle, void **send_comm, DevHandle **) {
    if (!handle || !send_comm || check_dev(dev) != ncclSuccess)
        return ncclInvalidArgument;
    *send_comm = nullptr;
    return guarded([&] {
        mesh::Handle h;
        std::memcpy(h.data(), handle, h.size());
        mesh::Comm *c = endpoint().connect(h);
        std::memcpy(handle, h.data(), h.size());
        if (c)
            *send_comm = new SendComm{c};
        return ncclSuccess;
    });
}

template <typename DevHandle>
ncclResult_t net_accept(void *listen_comm, void **recv_comm, DevHandle **) {
    if (!listen_comm || !recv_comm)
        return ncclInternalError;
    *recv_comm = nullptr;
    return guarded([&] {
        mesh::Comm *c = endpoint().accept(static_cast<ListenComm *>(listen_comm)->l);
        if (c)
            *recv_comm = new RecvComm{c};
        return ncclSuccess;
    });
}

// Sends are zero-copy from any host address: there is nothing to register,
// and device memory is not reachable at all.
ncclResult_t net_reg_mr(void *, void *, size_t, int type, void **mhandle) {
    if (type != NCCL_PTR_HOST) {
        std::lock_guard lock(state().mu);
        warn("regMr: only host memory (NCCL_PTR_HOST) is supported");
        return ncclInternalError;
    }
    if (mhandle)
        *mhandle = nullptr;
    return ncclSuccess;
}

ncclResult_t net_reg_mr_dmabuf(void *, void *, size_t, int, uint64_t, int, void **) {
    std::lock_guard lock(state().mu);
    warn("regMrDmaBuf: DMA-BUF is not supported (host memory only)");
    return ncclInternalError;
}

ncclResult_t net_dereg_mr(void *, void *) {
    return ncclSuccess;
}

template <typename Size>
ncclResult_t net_isend(void *send_comm, void *data, Size size, int tag, void *, void **request) {
    if (!send_comm || !request || size < 0)
        return ncclInternalError;
    *request = nullptr;
    return guarded([&] {
        auto &ep = endpoint();
        mesh::Request *r = ep.isend(static_cast<SendComm *>(send_comm)->c, data, size_t(size), tag);
        if (r)
            *request = new Req{r, 1};
        return ncclSuccess;
    });
}

template <typename Size>
ncclResult_t net_irecv(void *recv_comm, int n, void **data, Size *sizes, int *tags, void **,
                       void **request) {
    if (!recv_comm || !request || !data || !sizes || n < 1 || n > mesh::kMaxRecvs)
        return ncclInternalError;
    *request = nullptr;
    return guarded([&] {
        size_t caps[mesh::kMaxRecvs];
        for (int i = 0; i < n; i++) {
            if (sizes[i] < 0)
                return ncclInternalError;
            caps[i] = size_t(sizes[i]);
        }
        mesh::Request *r =
            endpoint().irecv(static_cast<RecvComm *>(recv_comm)->c, n, data, caps, tags);
        if (r)
            *request = new Req{r, n};
        return ncclSuccess;
    });
}

// Received data is in host memory, visible at once: nothing to flush. A NULL
// request tells NCCL the flush is complete, as net_ib does without GDR.
ncclResult_t net_iflush(void *, int, void **, int *, void **, void **request) {
    if (request)
        *request = nullptr;
    return ncclSuccess;
}

ncclResult_t net_test(void *request, int *done, int *sizes) {
    if (!request || !done)
        return ncclInternalError;
    *done = 0;
    auto *q = static_cast<Req *>(request);
    return guarded([&] {
        size_t got[mesh::kMaxRecvs] = {};
        if (!endpoint().test(q->r, got))
            return ncclSuccess;
        if (sizes)
            for (int i = 0; i < q->n; i++)
                sizes[i] = int(std::min<size_t>(got[i], size_t(INT32_MAX)));
        delete q;
        *done = 1;
        return ncclSuccess;
    });
}

ncclResult_t net_close_send(void *send_comm) {
    if (!send_comm)
        return ncclSuccess;
    std::unique_ptr<SendComm> s(static_cast<SendComm *>(send_comm));
    return guarded([&] {
        endpoint().close(s->c);
        return ncclSuccess;
    });
}

ncclResult_t net_close_recv(void *recv_comm) {
    if (!recv_comm)
        return ncclSuccess;
    std::unique_ptr<RecvComm> r(static_cast<RecvComm *>(recv_comm));
    return guarded([&] {
        endpoint().close(r->c);
        return ncclSuccess;
    });
}

ncclResult_t net_close_listen(void *listen_comm) {
    if (!listen_comm)
        return ncclSuccess;
    std::unique_ptr<ListenComm> l(static_cast<ListenComm *>(listen_comm));
    return guarded([&] {
        endpoint().close(l->l);
        return ncclSuccess;
    });
}

} // namespace

// The symbols NCCL looks up; device offload members stay NULL, as in a host
// plugin, which tells NCCL to keep the data path in its proxy.
extern "C" {
__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8 = {
    "incxdp",
    net_init,
    net_devices,
    net_props_v8,
    net_listen,
    net_connect<ncclNetDeviceHandle_v8_t>,
    net_accept<ncclNetDeviceHandle_v8_t>,
    net_reg_mr,
    net_reg_mr_dmabuf,
    net_dereg_mr,
    net_isend<int>,
    net_irecv<int>,
    net_iflush,
    net_test,
    net_close_send,
    net_close_recv,
    net_close_listen,
    nullptr, // getDeviceMr
    nullptr, // irecvConsumed
};

__attribute__((visibility("default"))) ncclNet_v9_t ncclNetPlugin_v9 = {
    "incxdp",
    net_init,
    net_devices,
    net_props_v9,
    net_listen,
    net_connect<ncclNetDeviceHandle_v9_t>,
    net_accept<ncclNetDeviceHandle_v9_t>,
    net_reg_mr,
    net_reg_mr_dmabuf,
    net_dereg_mr,
    net_isend<size_t>,
    net_irecv<size_t>,
    net_iflush,
    net_test,
    net_close_send,
    net_close_recv,
    net_close_listen,
    nullptr, // getDeviceMr
    nullptr, // irecvConsumed
    nullptr, // makeVDevice
};
}
