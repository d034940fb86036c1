// What everyone holds (holdings_count.hpp).
#include "core/holdings_count.hpp"

#include "core/quotas.hpp"
#include "job_id.hpp"

namespace muster::daemon {

Holdings HoldingsCount::of(int64_t uid, bool exact) const {
  const auto now = Clock::now();
  if (exact || !counted_.valid || counted_.job_changes != jobs_.changes() ||
      counted_.rounds != cluster_.coordinated_count() ||
      now - counted_.at > std::chrono::seconds(1)) {
    Counted c;
    c.valid = true, c.job_changes = jobs_.changes(), c.rounds = cluster_.coordinated_count(),
    c.at = now;
    auto add = [&](int64_t owner, const KeyValues& kv) {
      auto& [memory, state] = c.stores[owner];
      memory += store_cost(kv.size(), kv.bytes()), state += kv.bytes();
      c.memory += store_cost(kv.size(), kv.bytes()), c.state += kv.bytes();
    };
    for (const auto& [id, job] : jobs_.all()) add(charged_uid(job), job.kv);
    cluster_.each_global_store([&](const Job& store) { add(charged_uid(store), store.kv); });
    counted_ = std::move(c);
  }
  Holdings h;
  h.memory_total = counted_.memory, h.state_total = counted_.state;
  if (auto it = counted_.stores.find(uid); it != counted_.stores.end())
    h.memory_mine = it->second.first, h.state_mine = it->second.second;
  h.active = counted_.stores.size() + !counted_.stores.count(uid);
  for (const auto& [owner, bytes] : store_.parked_bytes()) {
    h.memory_total += bytes;
    if (owner == uid) h.memory_mine += bytes;
    if (owner != uid && !counted_.stores.count(owner)) ++h.active;
  }
  return h;
}

void HoldingsCount::grew(int64_t uid, uint64_t memory, uint64_t state) const {
  if (!counted_.valid) return;
  auto& [m, s] = counted_.stores[uid];
  m += memory, s += state;
  counted_.memory += memory, counted_.state += state;
}

}  // namespace muster::daemon
