#include "core/waits.hpp"

#include <algorithm>
#include <map>

namespace muster::daemon {

namespace {

int64_t age_ms(Clock::time_point since, Clock::time_point now) {
  return std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(now - since).count());
}

}  // namespace

proto::WaitRank local_rank(const Job& job, uint32_t i) {
  const Slot& s = job.slots[i];
  int64_t rank = job.cluster ? job.cluster->rank_offset + i : i;
  int64_t node = job.cluster ? job.cluster->node_rank : 0;
  return {rank, node, s.joined_pid ? s.joined_pid : s.pid};
}

proto::WaitRank rank_of(const Job& job, const ReplyTo& to) {
  if (!to.from_peer && to.peer_pid > 0)
    for (uint32_t i = 0; i < job.slots.size(); ++i)
      if (job.slots[i].joined_pid == to.peer_pid || job.slots[i].pid == to.peer_pid)
        return local_rank(job, i);
  return {-1, -1, to.from_peer ? 0 : to.peer_pid};
}

namespace {

proto::WaitStatus barrier_wait(const Job& job, const std::string& name, const BarrierState& b,
                               const Store& store, Clock::time_point now) {
  proto::WaitStatus w{"barrier", proto::bounded_wait_name(name),
                      job.global ? b.count : b.arrived.size(), job.world_size()};
  Clock::time_point since = now;
  for (uint64_t id : b.waiters)
    if (const auto* p = store.find(id)) {
      since = std::min(since, p->since);
      w.stuck = w.stuck || p->stuck;
    }
  w.age_ms = age_ms(since, now);
  // The coordinator's global store counts whole subtrees: it cannot name
  // the missing ranks.
  if (!job.global)
    for (uint32_t r = 0; r < job.world_size() && w.ranks.size() < proto::kMaxWaitRanks; ++r)
      if (!b.arrived.count(r)) w.ranks.push_back(local_rank(job, r));
  return w;
}

}  // namespace

void sort_ranks(proto::WaitStatus& w) {
  std::stable_sort(w.ranks.begin(), w.ranks.end(),
                   [](const auto& a, const auto& b) { return a.rank < b.rank; });
}

std::vector<proto::WaitStatus> open_waits(const Job& job, const Store& store,
                                          Clock::time_point now) {
  std::vector<proto::WaitStatus> waits;
  for (const auto& [name, b] : job.barriers)
    if (!b.waiters.empty()) waits.push_back(barrier_wait(job, name, b, store, now));
  // Key waits, one entry per set of awaited keys.
  std::map<std::string, proto::WaitStatus> by_keys;
  for (uint64_t id : job.key_waiters) {
    const auto* p = store.find(id);
    if (!p) continue;
    std::string keys;
    for (const auto& k : p->keys) {
      keys += (keys.empty() ? "" : ", ") + k;
      if (keys.size() > proto::kMaxWaitNameBytes) break;  // cut below anyway
    }
    keys = proto::bounded_wait_name(std::move(keys));
    auto [it, fresh] = by_keys.try_emplace(keys, proto::WaitStatus{"key", keys});
    auto& w = it->second;
    ++w.arrived;
    w.age_ms = std::max(w.age_ms, age_ms(p->since, now));
    w.stuck = w.stuck || p->stuck;
    if (w.ranks.size() < proto::kMaxWaitRanks) w.ranks.push_back(rank_of(job, p->to));
  }
  for (auto& [keys, w] : by_keys) {
    sort_ranks(w);
    waits.push_back(std::move(w));
  }
  std::stable_sort(waits.begin(), waits.end(),
                   [](const auto& a, const auto& b) { return a.age_ms > b.age_ms; });
  if (waits.size() > proto::kMaxWaits) waits.resize(proto::kMaxWaits);
  return waits;
}

}  // namespace muster::daemon
