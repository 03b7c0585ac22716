// SPDX-License-Identifier: BSD-2-Clause
#include "verbs_link.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#if INCXDP_HAVE_VERBS
#include "stop.h"
#include "verbs_session.h"
#endif

namespace incxdp::detail {

#if INCXDP_HAVE_VERBS
static_assert(kVerbsGidAuto == UINT32_MAX, "VerbsOptions::gid_index passes auto through");

namespace {

class VerbsLink final : public RoceLink {
  public:
    explicit VerbsLink(const CommConfig &cfg) : cfg_(cfg), session_(session_config(cfg)) {
        // The switch answers the QPN the device chose only once it knows it.
        if (cfg.verbs.publish_qpn)
            cfg.verbs.publish_qpn(session_.qp_num());
        session_.connect();
    }

    void run(RocePackets &call, const char *what, CommStats &stats) override {
        VerbsRunStats st;
        try {
            st = session_.run(call);
        } catch (const VerbsInterrupted &) {
            throw_interrupted(cfg_, what);
        } catch (const VerbsTimeout &e) {
            const uint32_t pool = cfg_.roce.pool ? cfg_.roce.pool : cfg_.window;
            throw CommTimeout(fmt::format("{}: rank {} job {} timed out: {}", what, cfg_.rank,
                                          cfg_.job, e.what()),
                              cfg_.rank, cfg_.job, uint32_t(e.idx % pool), e.idx);
        }
        stats.packets_sent += st.packets_sent;
        stats.bytes_sent += st.bytes_sent;
        stats.packets_received += st.results;
        stats.bytes_received += st.bytes_received;
        stats.results += st.results;
    }

  private:
    static VerbsConfig session_config(const CommConfig &c) {
        VerbsConfig v;
        v.device = c.verbs.device;
        v.gid_index = c.verbs.gid_index; // UINT32_MAX = kVerbsGidAuto
        v.local_ip = c.local_ip;
        v.switch_ip = c.switch_ip;
        v.remote_qpn = c.roce.remote_qpn;
        v.sq_psn = c.roce.up_base;
        v.rq_psn = c.roce.down_base;
        v.window = c.window;
        v.max_payload = 4 * c.effective_elems_per_packet();
        v.signal_every = std::min<uint32_t>(v.signal_every, c.window);
        v.ack_timeout = c.verbs.ack_timeout;
        v.retry_cnt = c.verbs.retry_cnt;
        v.timeout = c.deadline;
        v.stop = c.stop;
        return v;
    }

    CommConfig cfg_;
    VerbsSession session_;
};

} // namespace

std::unique_ptr<RoceLink> make_verbs_link(const CommConfig &cfg) {
    return std::make_unique<VerbsLink>(cfg);
}
#else
std::unique_ptr<RoceLink> make_verbs_link(const CommConfig &cfg) {
    throw std::invalid_argument(fmt::format(
        "communicator (rank {}, job {}): transport verbs: libincxdp was built without "
        "libibverbs (install libibverbs-dev and rebuild), use transport roce",
        cfg.rank, cfg.job));
}
#endif

} // namespace incxdp::detail
