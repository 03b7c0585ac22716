// SPDX-License-Identifier: BSD-2-Clause
// NETDEV_CMD_DEV_GET of the netdev generic netlink family through libnl.
#include <incxdp/netdev_xdp.h>

#include <netlink/genl/ctrl.h>
#include <netlink/genl/genl.h>
#include <netlink/msg.h>
#include <netlink/netlink.h>

#include <memory>

namespace incxdp::netdev {
namespace {

// uapi linux/netdev.h: family "netdev", version 1.
constexpr int kCmdDevGet = 1;
constexpr int kAttrIfindex = 1;
constexpr int kAttrXdpFeatures = 3;

using Sock = std::unique_ptr<nl_sock, decltype(&nl_socket_free)>;
using Msg = std::unique_ptr<nl_msg, decltype(&nlmsg_free)>;

int on_dev(nl_msg *m, void *arg) {
    nlattr *tb[kAttrXdpFeatures + 1] = {};
    // Later kernels add attributes after ours; the parse skips them.
    if (genlmsg_parse(nlmsg_hdr(m), 0, tb, kAttrXdpFeatures, nullptr) == 0 && tb[kAttrXdpFeatures])
        *static_cast<std::optional<uint64_t> *>(arg) = nla_get_u64(tb[kAttrXdpFeatures]);
    return NL_OK;
}

} // namespace

std::optional<uint64_t> xdp_features(int ifindex) {
    Sock sk(nl_socket_alloc(), nl_socket_free);
    if (!sk || genl_connect(sk.get()) < 0)
        return std::nullopt;
    // A GET is answered by one message (or an error); no ACK after it.
    nl_socket_disable_auto_ack(sk.get());
    int family = genl_ctrl_resolve(sk.get(), "netdev");
    if (family < 0)
        return std::nullopt;
    Msg msg(nlmsg_alloc(), nlmsg_free);
    if (!msg || !genlmsg_put(msg.get(), NL_AUTO_PORT, NL_AUTO_SEQ, family, 0, 0, kCmdDevGet, 1) ||
        nla_put_u32(msg.get(), kAttrIfindex, uint32_t(ifindex)) < 0)
        return std::nullopt;
    std::optional<uint64_t> out;
    if (nl_socket_modify_cb(sk.get(), NL_CB_VALID, NL_CB_CUSTOM, on_dev, &out) < 0 ||
        nl_send_auto(sk.get(), msg.get()) < 0)
        return std::nullopt;
    // An error reply (ENODEV) leaves `out` empty.
    if (nl_recvmsgs_default(sk.get()) < 0)
        return std::nullopt;
    return out;
}

} // namespace incxdp::netdev
