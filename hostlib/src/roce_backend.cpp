// SPDX-License-Identifier: BSD-2-Clause
// The RoCE backend: each collective is the packets RoceSteps builds, sent at
// the next indices of the rank's RC connection (docs/ROCE.md §2, §4).
#include "engine_backend.h"
#include "roce_collectives.h"

#include <stdexcept>
#include <vector>

namespace incxdp::detail {
namespace {

class RoceBackend final : public EngineBackend {
  public:
    RoceBackend(const CommConfig &cfg, std::unique_ptr<RoceLink> link, const Transport *frames)
        : cfg_(cfg),
          // A device's frames are skb-built and cannot grow at the switch, so
          // broadcast pads them.
          pad_broadcast_(!frames || !frames->frames_grow_at_switch()), link_(std::move(link)) {
        if (!link_)
            throw std::invalid_argument("roce backend: no RC connection to run on");
    }

    void run(const Call &c, const char *what, CommStats &stats) override {
        RoceSteps steps(c, cfg_.rank, cfg_.world_size, cfg_.effective_elems_per_packet(), exps_,
                        pad_broadcast_);
        steps.prepare(what); // throws before anything is sent
        try {
            link_->run(steps, what, stats);
        } catch (...) {
            failed_ = true; // the connection's sequence is now unknown to the switch
            throw;
        }
    }

    // Nothing to park: a new connection starts from idx 0 once the switches
    // were reset (docs/ROCE.md §4).
    void close(CommStats &) override {}

  private:
    const CommConfig &cfg_;
    bool pad_broadcast_;
    std::unique_ptr<RoceLink> link_;
    std::vector<int8_t> exps_;
};

} // namespace

std::unique_ptr<EngineBackend>
make_roce_backend(const CommConfig &cfg, std::unique_ptr<RoceLink> link, const Transport *frames) {
    return std::make_unique<RoceBackend>(cfg, std::move(link), frames);
}

} // namespace incxdp::detail
