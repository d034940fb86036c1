// The coordinator's whole-job picture of a job's open barriers and key
// waits (job_waits, for `muster status --job`): each node's heartbeat says
// what its own ranks wait in; put together, a barrier shows every rank
// that has not arrived, on whichever node, with its pid where its node
// said it. At most one heartbeat (peer_timeout/4) old.
#include <algorithm>
#include <set>

#include "cluster/coordinator.hpp"

namespace muster::daemon {

namespace {

int64_t ms_since(Clock::time_point t, Clock::time_point now) {
  return std::max<int64_t>(0,
                           std::chrono::duration_cast<std::chrono::milliseconds>(now - t).count());
}

// The nodes of a closed round in node rank order, with their first rank.
std::vector<std::pair<const RoundNode*, uint32_t>> by_rank(const CoordJob& cj) {
  std::vector<std::pair<const RoundNode*, uint32_t>> nodes;
  for (const auto& n : cj.nodes) nodes.push_back({&n, 0});
  std::sort(nodes.begin(), nodes.end(),
            [](const auto& a, const auto& b) { return a.first->node_rank < b.first->node_rank; });
  uint32_t offset = 0;
  for (auto& [n, first] : nodes) {
    first = offset;
    offset += n->nproc;
  }
  return nodes;
}

void add_ranks(proto::WaitStatus& to, const std::vector<proto::WaitRank>& ranks) {
  for (const auto& r : ranks)
    if (to.ranks.size() < proto::kMaxWaitRanks) to.ranks.push_back(r);
}

}  // namespace

proto::JobWaitsReply Coordinator::job_waits(const proto::JobWaits& m) const {
  auto it = rounds_.find(m.job);
  if (it == rounds_.end())
    throw Error(ErrorCode::kUnknownJob, "this daemon coordinates no job '" + m.job + "'");
  const CoordJob& cj = it->second;
  auto member = [&](const std::vector<RoundNode>& v) {
    return std::any_of(v.begin(), v.end(), [&](const auto& n) { return n.node_id == m.node_id; });
  };
  if (!member(cj.nodes) && !member(cj.waiting))
    throw Error(ErrorCode::kPermissionDenied,
                "node '" + m.node_id + "' is not one of job '" + m.job + "'");
  if (!cj.closed || m.generation != cj.generation)
    throw Error(ErrorCode::kStaleGeneration, "job '" + m.job + "' is at generation " +
                                                 std::to_string(cj.generation) +
                                                 (cj.closed ? "" : " (forming)"));
  return {merged_waits(cj)};
}

std::vector<proto::WaitStatus> Coordinator::merged_waits(const CoordJob& cj) const {
  const auto now = Clock::now();
  const auto nodes = by_rank(cj);
  std::map<std::pair<std::string, std::string>, proto::WaitStatus> merged;  // by kind, name
  std::map<std::string, std::set<const RoundNode*>> in_barrier;
  for (const auto& [n, first] : nodes)
    for (const auto& w : n->waits) {
      auto& x = merged[{w.kind, w.name}];
      x.kind = w.kind;
      x.name = w.name;
      x.expected = w.kind == "barrier" ? cj.store.global_world_size : 0;
      x.arrived += w.arrived;
      x.age_ms = std::max(x.age_ms, w.age_ms + ms_since(n->waits_at, now));
      x.stuck = x.stuck || w.stuck;
      add_ranks(x, w.ranks);
      if (w.kind == "barrier") in_barrier[w.name].insert(n);
    }
  std::vector<proto::WaitStatus> r;
  for (auto& [key, x] : merged) {
    // A node none of whose ranks entered the barrier said nothing of it:
    // all its ranks are missing (their pids are its daemon's to know).
    for (const auto& [n, first] : nodes)
      if (x.kind == "barrier" && !in_barrier[x.name].count(n))
        for (uint32_t i = 0; i < n->nproc && x.ranks.size() < proto::kMaxWaitRanks; ++i)
          x.ranks.push_back({first + i, n->node_rank, 0});
    std::sort(x.ranks.begin(), x.ranks.end(),
              [](const auto& a, const auto& b) { return a.rank < b.rank; });
    r.push_back(std::move(x));
  }
  std::stable_sort(r.begin(), r.end(),
                   [](const auto& a, const auto& b) { return a.age_ms > b.age_ms; });
  if (r.size() > proto::kMaxWaits) r.resize(proto::kMaxWaits);
  return r;
}

std::vector<proto::WaitStatus> Coordinator::job_waits_of(const std::string& job) const {
  auto it = rounds_.find(job);
  if (it == rounds_.end() || !it->second.closed) return {};
  return merged_waits(it->second);
}

}  // namespace muster::daemon
