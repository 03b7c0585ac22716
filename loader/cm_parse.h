// SPDX-License-Identifier: BSD-2-Clause
// htsim connection matrices (.cm): the grammar of htsim's
// ConnectionMatrix::load plus the INC fork's `semantics` tokens (docs/CM.md).
// Pure: text in, a Matrix or one CmError out. parse() also checks statically
// how the file's triggers are fired (a oneshot fired twice, ...).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace incxdp::cm {

/// The one error of a file: what() is "line N: <problem> (token 'T'): <line>".
struct CmError : std::runtime_error {
    CmError(int line, std::string token, const std::string &what);
    int line;          ///< 1-based line of the file
    std::string token; ///< the offending token (or the header keyword)
};

enum class AggOp { Sum, Max, Min, Avg };
enum class AggDir { Up, Down };
const char *agg_op_name(AggOp op);    ///< "SUM", "MAX", "MIN", "AVG"
const char *agg_dir_name(AggDir dir); ///< "UP", "DOWN"

/// `semantics agg_op OP agg_dir DIR fid F rid R cid C` (INC fork).
struct Semantics {
    AggOp op = AggOp::Sum;
    AggDir dir = AggDir::Up;
    uint32_t fid = 0, rid = 0, cid = 0;
    bool operator==(const Semantics &) const = default;
};

struct Flow {
    uint32_t src = 0, dst = 0;
    uint32_t id = 0;                   ///< non-zero, unique
    std::optional<double> start_ps;    ///< exactly one of start_ps and trigger
    std::optional<uint32_t> trigger;   ///< start when this trigger fires
    uint64_t size = 0;                 ///< bytes; 0 = unbounded (old files)
    std::optional<uint32_t> send_done; ///< fired by the sender when acknowledged
    std::optional<uint32_t> recv_done; ///< fired by the receiver when complete
    std::optional<int64_t> prio;
    std::optional<Semantics> semantics; ///< INC flows only
    int line = 0;
    bool operator==(const Flow &o) const; ///< everything but `line`
};

enum class TriggerKind { Oneshot, Multishot, Barrier };
const char *trigger_kind_name(TriggerKind k); ///< "oneshot", "multishot", "barrier"

struct Trigger {
    uint32_t id = 0;
    TriggerKind kind = TriggerKind::Oneshot;
    uint32_t count = 0; ///< barrier: firings needed; 0 for the others
    int line = 0;
    bool operator==(const Trigger &o) const {
        return id == o.id && kind == o.kind && count == o.count;
    }
};

enum class SwitchType { Tor, Agg, Core };
const char *switch_type_name(SwitchType t); ///< "TOR", "AGG", "CORE"

/// `failure switch_type T switch_id S link_id L`: a failed link.
struct Failure {
    SwitchType type = SwitchType::Tor;
    uint32_t switch_id = 0, link_id = 0;
    int line = 0;
    bool operator==(const Failure &o) const {
        return type == o.type && switch_id == o.switch_id && link_id == o.link_id;
    }
};

struct Matrix {
    std::optional<uint32_t> nodes; ///< `Nodes` header, if present
    std::vector<Flow> flows;       ///< file order (multishot triggers use it)
    std::vector<Trigger> triggers; ///< file order
    std::vector<Failure> failures;
    /// Lenient mode: the trigger flaws that strict mode rejects, one line
    /// each ("line N: ..."); also notes that are never errors (a trigger
    /// whose waiting flows are never started).
    std::vector<std::string> warnings;

    /// `nodes`, or 1 + the largest index used when there is no header.
    uint32_t node_count() const;
    const Trigger *trigger(uint32_t id) const; ///< nullptr if not declared
    const Flow *flow(uint32_t id) const;       ///< nullptr if absent
};

struct ParseOptions {
    /// Trigger firing flaws (a oneshot fired by two flows or with no waiting
    /// flow, a barrier fired more often than its count) become warnings.
    bool lenient = false;
};

/// Parses a whole file's text. Throws CmError.
Matrix parse(std::string_view text, const ParseOptions &opts = {});
/// Reads the file, then parse(); a read failure is a CmError on line 0.
Matrix parse_file(const std::string &path, const ParseOptions &opts = {});

/// The file text in htsim's grammar: header (`Nodes`, `Connections`, and
/// `Triggers`/`Failures` when non-zero), flows, triggers, failures; single
/// spaces, no comments. Keys in the order htsim's generators write them.
std::string to_text(const Matrix &m);

} // namespace incxdp::cm
