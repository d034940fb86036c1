// The sentence muster run's progress lines and muster status print for a
// rendezvous that forms: one wording for both.
#include "forming.hpp"

#include <cstdio>

#include "wait_text.hpp"

namespace muster {

namespace {

// Whole seconds where they are whole, else one decimal.
std::string seconds(int64_t ms) {
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  return buf;
}

}  // namespace

std::string to_string(const Forming& f) {
  if (f.max_nodes == 0) return "";
  uint32_t n = f.nodes;
  std::string names;
  for (const auto& name : f.joined) names += (names.empty() ? "" : ", ") + name;
  if (n > f.joined.size()) names += " and " + std::to_string(n - f.joined.size()) + " more";
  std::string s = std::to_string(n) + " of " + std::to_string(f.max_nodes) + " nodes";
  if (!names.empty()) s += " (" + names + ")";
  if (n < f.max_nodes) s += ", waiting for " + std::to_string(f.max_nodes - n) + " more";
  s += "; forms at " + std::to_string(f.max_nodes);
  if (f.min_nodes < f.max_nodes) {
    s += ", or at " + std::to_string(f.min_nodes);
    // A countdown rounds up: "in 0 s" would be a lie until it is over.
    s += f.closes_in_ms >= 0
             ? " after the last call in " + seconds((f.closes_in_ms + 999) / 1000 * 1000)
             : " after a last call of " + seconds(f.last_call_ms);
  }
  return s;
}

std::string to_string(const WaitInfo& w) {
  proto::WaitStatus p{w.kind, w.name, w.arrived, w.expected, {}, w.age_ms, w.stuck};
  for (const auto& r : w.ranks) p.ranks.push_back({r.rank, r.node, r.pid});
  return describe(p);
}

namespace detail {

WaitInfo from_wire(const proto::WaitStatus& w) {
  WaitInfo out{w.kind, w.name, w.arrived, w.expected, {}, w.age_ms, w.stuck};
  for (const auto& r : w.ranks) out.ranks.push_back({r.rank, r.node, r.pid});
  return out;
}

Forming from_wire(const proto::Forming& f) {
  return {f.nodes, f.joined, f.min_nodes, f.max_nodes, f.last_call_ms, f.closes_in_ms.value_or(-1)};
}

}  // namespace detail

}  // namespace muster
