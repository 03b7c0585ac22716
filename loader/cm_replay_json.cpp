// SPDX-License-Identifier: BSD-2-Clause
// `incxdp replay -j`: the result as JSON (docs/CM.md §4, "Output").
#include "cm_replay.h"

namespace incxdp::cm {

nlohmann::json to_json(const ReplayResult &r) {
    using nlohmann::json;
    json flows = json::array();
    auto time = [](double s) { return s < 0 ? json(nullptr) : json(s); };
    for (const FlowResult &f : r.flows) {
        json j = {{"id", f.id},
                  {"src", f.src},
                  {"dst", f.dst},
                  {"src_host", f.src_host},
                  {"dst_host", f.dst_host},
                  {"size", f.size},
                  {"received", f.received},
                  {"state", f.state},
                  {"verified", f.verified},
                  {"released_s", time(f.released_s)},
                  {"start_s", time(f.start_s)},
                  {"recv_done_s", time(f.recv_done_s)},
                  {"send_done_s", time(f.send_done_s)},
                  {"fct_s", f.send_done_s < 0 ? json(nullptr) : json(f.send_done_s - f.start_s)},
                  {"held", f.held}};
        if (f.semantics)
            j["semantics"] = {{"agg_op", agg_op_name(f.semantics->op)},
                              {"agg_dir", agg_dir_name(f.semantics->dir)},
                              {"fid", f.semantics->fid},
                              {"rid", f.semantics->rid},
                              {"cid", f.semantics->cid}};
        if (!f.error.empty())
            j["error"] = f.error;
        flows.push_back(j);
    }
    json triggers = json::array();
    for (const TriggerResult &t : r.triggers)
        triggers.push_back({{"id", t.id},
                            {"kind", trigger_kind_name(t.kind)},
                            {"count", t.count},
                            {"firings_s", t.firings_s},
                            {"ignored", t.ignored}});
    json links = json::array();
    for (const LinkBytes &l : r.links)
        links.push_back(
            {{"a", l.a}, {"b", l.b}, {"tier", l.tier}, {"a_to_b", l.a_to_b}, {"b_to_a", l.b_to_a}});
    size_t done = 0;
    for (const FlowResult &f : r.flows)
        done += f.state == "done";
    return {{"ok", r.ok()},
            {"aggregated", r.aggregated},
            // Where INC flows were reduced: aggregator hosts or switches.
            {"aggregation", r.aggregation},
            {"switches", r.inc_report},
            {"inc_flows", r.inc_flows},
            {"flows_done", done},
            {"flows_total", r.flows.size()},
            {"job_s", r.job_s},
            {"total_bytes", r.total_bytes},
            {"up_bytes", r.up_bytes},
            {"down_bytes", r.down_bytes},
            {"timed_out", r.timed_out},
            {"errors", r.errors},
            {"flows", flows},
            {"triggers", triggers},
            {"links", links},
            {"tiers", r.tiers}};
}

} // namespace incxdp::cm
