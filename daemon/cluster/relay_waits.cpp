// Which of a node's ranks wait where in a multi-node job: its relayed
// barriers and key waits as status shows them, and the once-per-wait line
// for those older than --stuck-after (relays.hpp).
#include <algorithm>

#include "cluster/relays.hpp"
#include "core/waits.hpp"
#include "log.hpp"

namespace muster::daemon {

namespace {

int64_t age_ms(Clock::time_point since, Clock::time_point now) {
  return std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count());
}

// The awaited keys of a coalescing key ("<type>\0key\0key..."), ", "-joined.
std::string keys_of(const std::string& coalescing) {
  std::string keys;
  size_t at = coalescing.find('\0');
  while (at != std::string::npos) {
    size_t next = coalescing.find('\0', at + 1);
    keys += (keys.empty() ? "" : ", ") + coalescing.substr(at + 1, next - at - 1);
    at = next;
  }
  // Bounded where it is made: it goes into heartbeats, which the
  // coordinator refuses whole over the decoder's limit.
  return proto::bounded_wait_name(std::move(keys));
}

}  // namespace

std::vector<proto::WaitStatus> Relays::waits(const Job& job, Clock::time_point now) const {
  std::vector<proto::WaitStatus> out;
  auto rit = relays_.find(job.id);
  if (rit == relays_.end() || !job.cluster) return out;
  const RelayState& r = rit->second;
  for (const auto& [name, b] : r.barriers) {
    if (b.local_ranks.empty()) continue;  // only children's ranks wait here
    proto::WaitStatus w{"barrier", proto::bounded_wait_name(name), b.local_ranks.size(),
                        job.local_world_size};
    for (uint32_t i = 0; i < job.local_world_size && w.ranks.size() < proto::kMaxWaitRanks; ++i)
      if (!b.local_ranks.count(i)) w.ranks.push_back(local_rank(job, i));
    w.age_ms = age_ms(b.since, now);
    w.stuck = now - b.since >= stuck_after_;
    out.push_back(std::move(w));
  }
  for (const auto& [key, tos] : r.gets) {
    proto::WaitStatus w{"key", keys_of(key)};
    for (const auto& to : tos) {
      if (to.from_peer) continue;  // a child's ranks
      ++w.arrived;
      if (w.ranks.size() < proto::kMaxWaitRanks) w.ranks.push_back(rank_of(job, to));
    }
    if (w.arrived == 0) continue;
    sort_ranks(w);
    auto since = r.gets_since.find(key);
    if (since != r.gets_since.end()) {
      w.age_ms = age_ms(since->second.first, now);
      w.stuck = now - since->second.first >= stuck_after_;
    }
    out.push_back(std::move(w));
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const auto& a, const auto& b) { return a.age_ms > b.age_ms; });
  if (out.size() > proto::kMaxWaits) out.resize(proto::kMaxWaits);
  return out;
}

uint64_t Relays::report_stuck(Clock::time_point now) {
  uint64_t logged = 0;
  for (auto& [id, r] : relays_) {
    const Job* job = jobs_.find(id);
    if (!job) continue;
    bool due = false;
    for (auto& [name, b] : r.barriers)
      due = due || (!b.stuck_logged && !b.local_ranks.empty() && now - b.since >= stuck_after_);
    for (auto& [key, s] : r.gets_since) due = due || (!s.second && now - s.first >= stuck_after_);
    if (!due) continue;
    for (const auto& w : waits(*job, now)) {
      if (!w.stuck) continue;
      bool* flag = nullptr;
      if (w.kind == "barrier") {
        for (auto& [name, b] : r.barriers)
          if (proto::bounded_wait_name(name) == w.name) flag = &b.stuck_logged;
      } else {
        for (auto& [key, s] : r.gets_since)
          if (keys_of(key) == w.name) flag = &s.second;
      }
      if (!flag || *flag) continue;
      *flag = true;
      ++logged;
      log::warning("job=" + id + " stuck: " + describe(w));
    }
  }
  return logged;
}

WaitCounts Relays::wait_counts(Clock::time_point now) const {
  WaitCounts n;
  for (const auto& [id, r] : relays_) {
    for (const auto& [name, b] : r.barriers) {
      n.parked += b.local_ranks.size();
      if (now - b.since >= stuck_after_) n.stuck += b.local_ranks.size();
    }
    for (const auto& [key, tos] : r.gets) {
      auto local =
          std::count_if(tos.begin(), tos.end(), [](const auto& t) { return !t.from_peer; });
      n.parked += local;
      auto since = r.gets_since.find(key);
      if (since != r.gets_since.end() && now - since->second.first >= stuck_after_)
        n.stuck += local;
    }
  }
  return n;
}

}  // namespace muster::daemon
