// SPDX-License-Identifier: BSD-2-Clause
#include <incxdp/xdp_prog_maps.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <xdp/libxdp.h>

#include <cstring>
#include <memory>
#include <unistd.h>

namespace incxdp::xdpmaps {

std::vector<uint32_t> prog_ids(int ifindex)
{
    std::vector<uint32_t> ids;
    xdp_multiprog *mp = xdp_multiprog__get_from_ifindex(ifindex);
    if (!mp || libxdp_get_error(mp))
        return ids;
    std::unique_ptr<xdp_multiprog, decltype(&xdp_multiprog__close)> guard(mp, xdp_multiprog__close);
    if (xdp_multiprog__is_legacy(mp)) {
        if (xdp_program *p = xdp_multiprog__main_prog(mp))
            ids.push_back(xdp_program__id(p));
        if (xdp_program *p = xdp_multiprog__hw_prog(mp))
            ids.push_back(xdp_program__id(p));
        return ids;
    }
    for (xdp_program *p = xdp_multiprog__next_prog(nullptr, mp); p; p = xdp_multiprog__next_prog(p, mp))
        ids.push_back(xdp_program__id(p));
    return ids;
}

int map_fd(uint32_t prog_id, const char *name, int type)
{
    int prog_fd = bpf_prog_get_fd_by_id(prog_id);
    if (prog_fd < 0)
        return -1;
    std::unique_ptr<int, void (*)(int *)> close_prog(&prog_fd, [](int *fd) { ::close(*fd); });
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(prog_fd, &info, &len))
        return -1;
    // Two calls: the first learns how many maps there are.
    std::vector<uint32_t> ids(info.nr_map_ids);
    bpf_prog_info info2{};
    info2.nr_map_ids = info.nr_map_ids;
    info2.map_ids = reinterpret_cast<uint64_t>(ids.data());
    len = sizeof(info2);
    if (bpf_obj_get_info_by_fd(prog_fd, &info2, &len))
        return -1;
    ids.resize(std::min<size_t>(ids.size(), info2.nr_map_ids));
    for (uint32_t id : ids) {
        int fd = bpf_map_get_fd_by_id(id);
        if (fd < 0)
            continue;
        bpf_map_info mi{};
        uint32_t mlen = sizeof(mi);
        if (bpf_obj_get_info_by_fd(fd, &mi, &mlen) == 0 && std::strcmp(mi.name, name) == 0 &&
            (type < 0 || mi.type == uint32_t(type)))
            return fd;
        ::close(fd);
    }
    return -1;
}

int map_fd_on_iface(int ifindex, const char *name, int type, uint32_t *prog_id)
{
    for (uint32_t id : prog_ids(ifindex))
        if (int fd = map_fd(id, name, type); fd >= 0) {
            if (prog_id)
                *prog_id = id;
            return fd;
        }
    return -1;
}

} // namespace incxdp::xdpmaps
