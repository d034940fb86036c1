#include "wait_text.hpp"

namespace muster {

namespace {
std::string rank_text(const proto::WaitRank& r) {
  std::string s = r.rank >= 0 ? "rank " + std::to_string(r.rank) : "a rank of another node";
  std::string in;
  if (r.node >= 0) in = "node " + std::to_string(r.node);
  if (r.pid > 0) in += (in.empty() ? "pid " : ", pid ") + std::to_string(r.pid);
  return in.empty() ? s : s + " (" + in + ")";
}
std::string ranks_text(const std::vector<proto::WaitRank>& ranks) {
  std::string s;
  for (const auto& r : ranks) s += (s.empty() ? "" : ", ") + rank_text(r);
  return s;
}
}  // namespace

std::string describe(const proto::WaitStatus& w) {
  std::string age = std::to_string(w.age_ms / 1000) + " s";
  if (w.kind == "barrier") {
    std::string s =
        "barrier '" + w.name + "': " + std::to_string(w.arrived) + "/" + std::to_string(w.expected);
    if (!w.ranks.empty()) s += ", waiting for " + ranks_text(w.ranks);
    return s + " for " + age;
  }
  std::string who =
      w.ranks.empty() ? std::to_string(w.arrived) + " request(s)" : ranks_text(w.ranks);
  return who + (w.arrived == 1 ? " waits" : " wait") + " for key '" + w.name + "' for " + age;
}

}  // namespace muster
