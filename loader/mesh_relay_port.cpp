// SPDX-License-Identifier: BSD-2-Clause
#include "mesh_relay_port.h"

#include <incxdp/relay_ctl.h>

namespace incxdp::mesh {

namespace {

class XdpRelay : public RelayPort {
  public:
    XdpRelay(const std::string &pin_dir, const std::vector<std::string> &ifaces,
             const std::string &mode)
        : pin_dir_(pin_dir) {
        relay::attach(pin_dir, ifaces, mode);
        try {
            maps_ = std::make_unique<relay::RelayMaps>(relay::RelayMaps::open(pin_dir));
        } catch (...) {
            relay::detach(pin_dir);
            throw;
        }
    }
    ~XdpRelay() override {
        maps_.reset();
        try {
            relay::detach(pin_dir_);
        } catch (const std::exception &) {
            // Nothing left to do on the way out; the daemon reports its own errors.
        }
    }
    void set_config(NodeId self, bool relay_enabled, uint32_t max_hops) override {
        relay::RelayConfig cfg;
        cfg.self_node = self;
        cfg.relay_enabled = relay_enabled;
        cfg.max_hops = max_hops;
        maps_->set_config(cfg);
    }
    void set_route(NodeId dst, const incxdp_relay_route &r) override { maps_->set_route(dst, r); }
    void del_route(NodeId dst) override { maps_->del_route(dst); }

  private:
    std::string pin_dir_;
    std::unique_ptr<relay::RelayMaps> maps_;
};

class NullRelay : public RelayPort {
  public:
    void set_config(NodeId, bool, uint32_t) override {}
    void set_route(NodeId, const incxdp_relay_route &) override {}
    void del_route(NodeId) override {}
};

} // namespace

std::unique_ptr<RelayPort> attach_relay(const std::string &pin_dir,
                                        const std::vector<std::string> &ifaces,
                                        const std::string &mode) {
    return std::make_unique<XdpRelay>(pin_dir, ifaces, mode);
}

std::unique_ptr<RelayPort> null_relay() {
    return std::make_unique<NullRelay>();
}

std::string relay_default_pin_dir() {
    return relay::default_pin_dir();
}

std::vector<std::pair<std::string, uint64_t>> relay_stats(const std::string &pin_dir) {
    const auto counts = relay::RelayMaps::open(pin_dir).stats();
    std::vector<std::pair<std::string, uint64_t>> out;
    for (size_t i = 0; i < counts.size(); i++)
        out.emplace_back(relay::stat_names()[i], counts[i]);
    return out;
}

} // namespace incxdp::mesh
