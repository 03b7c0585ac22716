// SPDX-License-Identifier: BSD-2-Clause
// ref-pcap-switch's modes without a network (ref_pcap_tools.cpp).
#pragma once

#include <incxdp/tree.h>

#include <nlohmann/json.hpp>

#include <string>

namespace incxdp::refsw {

/// Sample frames built by ref_pcap_frame.h, to a pcap file (for scapy). 0 on success.
int write_frames(const std::string &path);
/// One line per frame of a pcap file: the parse verdict and the fields. 0 on success.
int check_frames(const std::string &path);
/// The tree plan of one job, every field of every connection and switch.
nlohmann::json plan_json(const topo::TreePlan &plan);

} // namespace incxdp::refsw
