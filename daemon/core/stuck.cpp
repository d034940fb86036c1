// The stuck-wait report: a barrier or key wait parked longer than
// --stuck-after is logged once, with the ranks it waits for, when the
// Store's timer for it comes (the loop wakes for it: no polling).
#include <algorithm>

#include "core/state.hpp"
#include "log.hpp"

namespace muster::daemon {

std::vector<proto::WaitStatus> State::open_waits(const std::string& id) const {
  const Job* job = jobs_.find(id);
  if (!job) return {};
  return daemon::open_waits(*job, store_, Clock::now());
}

void State::report_stuck(Clock::time_point now) {
  for (uint64_t id : store_.take_stuck(now)) {
    Store::Waiter* w = store_.find(id);
    Job* job = w ? find_store_job(w->to, w->job) : nullptr;
    if (!job) continue;
    std::string kind = "barrier", name = w->barrier;
    if (w->kind == Store::Kind::kBarrier) {
      auto b = job->barriers.find(w->barrier);
      if (b == job->barriers.end() || b->second.stuck_logged) continue;
      b->second.stuck_logged = true;
    } else {
      if (w->stuck_logged) continue;
      // One line for every rank waiting for the same keys now.
      for (uint64_t other : job->key_waiters)
        if (Store::Waiter* o = store_.find(other); o && o->keys == w->keys) o->stuck_logged = true;
      kind = "key", name.clear();
      for (const auto& k : w->keys) name += (name.empty() ? "" : ", ") + k;
    }
    // The coordinator's store counts whole subtrees: the nodes' heartbeats
    // name the missing ranks, once they came.
    name = proto::bounded_wait_name(std::move(name));  // as the waits name it
    auto waits = job->global ? coordinated_waits(job->id) : std::vector<proto::WaitStatus>{};
    bool named = std::any_of(waits.begin(), waits.end(),
                             [&](const auto& s) { return s.kind == kind && s.name == name; });
    if (!named) waits = daemon::open_waits(*job, store_, now);
    for (const auto& s : waits)
      if (s.kind == kind && s.name == name) {
        ++stuck_detected_;
        log::warning("job=" + job->id + " stuck: " + describe(s));
        break;
      }
  }
}

}  // namespace muster::daemon
