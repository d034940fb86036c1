#include <algorithm>

#include "core/key_values.hpp"
#include "core/queues.hpp"
#include "core/store.hpp"
#include "job_id.hpp"

namespace muster::daemon {

namespace {
uint64_t cost_of(const Store::Waiter& w) {
  uint64_t keys = w.barrier.size();
  for (const auto& k : w.keys) keys += k.size();
  return Store::parked_cost(keys);
}
}  // namespace

uint64_t Store::add(Waiter w) {
  uint64_t id = next_++;
  w.deadline_it = deadlines_.emplace(w.deadline, id);
  w.since = Clock::now();
  w.stuck_it = stuck_due_.emplace(w.since + stuck_after_, id);
  parked_bytes_[job_key_owner(w.job)] += cost_of(w);
  waiters_.emplace(id, std::move(w));
  return id;
}

void Store::drop(std::map<uint64_t, Waiter>::iterator it) {
  deadlines_.erase(it->second.deadline_it);
  if (auto b = parked_bytes_.find(job_key_owner(it->second.job)); b != parked_bytes_.end())
    if ((b->second -= std::min(b->second, cost_of(it->second))) == 0) parked_bytes_.erase(b);
  if (it->second.stuck)
    --stuck_;
  else
    stuck_due_.erase(it->second.stuck_it);
  waiters_.erase(it);
}

const Store::Waiter* Store::find(uint64_t id) const {
  auto it = waiters_.find(id);
  return it == waiters_.end() ? nullptr : &it->second;
}

Store::Waiter* Store::find(uint64_t id) {
  auto it = waiters_.find(id);
  return it == waiters_.end() ? nullptr : &it->second;
}

std::vector<uint64_t> Store::take_stuck(Clock::time_point now) {
  std::vector<uint64_t> ids;
  while (!stuck_due_.empty() && stuck_due_.begin()->first <= now) {
    uint64_t id = stuck_due_.begin()->second;
    stuck_due_.erase(stuck_due_.begin());
    waiters_.at(id).stuck = true;
    ++stuck_;
    ids.push_back(id);
  }
  return ids;
}

void Store::wait_keys(Job& job, const ReplyTo& to, KeyWait kind, std::vector<std::string> keys,
                      Clock::time_point deadline) {
  constexpr Kind kinds[] = {Kind::kGet, Kind::kWait, Kind::kMultiGet, Kind::kPop};
  Kind k = kinds[static_cast<size_t>(kind)];
  job.key_waiters.push_back(add({to, k, job.id, std::move(keys), "", 0, deadline}));
}

void Store::arrive(Job& job, const ReplyTo& to, const std::string& name, uint32_t rank,
                   uint32_t count, uint64_t world, Clock::time_point deadline, Answers& a) {
  auto& b = job.barriers[name];
  b.count += count;
  if (b.count < world) {
    Waiter w{to, Kind::kBarrier, job.id, {}, name, rank, deadline};
    w.count = count;
    b.waiters.push_back(add(std::move(w)));
    return;
  }
  for (auto id : b.waiters)
    if (auto it = waiters_.find(id); it != waiters_.end()) {
      a.ok(it->second.to);
      drop(it);
    }
  a.ok(to);
  job.barriers.erase(name);
}

void Store::key_changed(Job& job, Answers& a) {
  auto& ids = job.key_waiters;
  std::vector<uint64_t> keep;
  for (auto id : ids) {
    auto it = waiters_.find(id);
    if (it == waiters_.end()) continue;  // already timed out
    const Waiter& w = it->second;
    if (!job.has_all(w.keys)) {
      keep.push_back(id);
      continue;
    }
    answer(job, w, a);
    drop(it);
  }
  ids = std::move(keep);
}

void Store::answer(Job& job, const Waiter& w, Answers& a) {
  switch (w.kind) {
    case Kind::kGet:
      return a.value(w.to, *job.kv.find(w.keys[0]));
    case Kind::kMultiGet: {
      std::vector<std::string> v;
      for (const auto& k : w.keys) v.push_back(*job.kv.find(k));
      return a.values(w.to, v);
    }
    case Kind::kPop:
      try {
        // The key is set, so its queue holds an item (or is no queue).
        return a.value(w.to, *queue_pop(job.kv, w.keys[0]));
      } catch (const Error& e) {
        return a.error(w.to, e.code(), e.what());
      }
    default:
      return a.ok(w.to);
  }
}

void Store::fail_ids(const std::vector<uint64_t>& ids, ErrorCode code, const std::string& why,
                     Answers& a) {
  for (auto id : ids)
    if (auto it = waiters_.find(id); it != waiters_.end()) {
      a.error(it->second.to, code, why);
      drop(it);
    }
}

void Store::fail_barriers(Job& job, const std::string& rank_what, Answers& a) {
  for (auto& [name, b] : job.barriers)
    fail_ids(b.waiters, ErrorCode::kPeerExited,
             "barrier '" + name + "' of job '" + job.id + "' cannot complete: rank " + rank_what,
             a);
  job.barriers.clear();
}

void Store::fail_all(Job& job, ErrorCode code, const std::string& why, Answers& a) {
  std::vector<uint64_t> ids = job.key_waiters;
  for (auto& [name, b] : job.barriers) ids.insert(ids.end(), b.waiters.begin(), b.waiters.end());
  fail_ids(ids, code, why, a);
  job.key_waiters.clear();
  job.barriers.clear();
}

std::optional<Clock::time_point> Store::next_deadline() const {
  std::optional<Clock::time_point> next;
  if (!deadlines_.empty()) next = deadlines_.begin()->first;
  if (!stuck_due_.empty() && (!next || stuck_due_.begin()->first < *next))
    next = stuck_due_.begin()->first;
  return next;
}

// What a wait that timed out missed. A barrier arrival that gave up no
// longer counts as arrived.
std::string Store::timeout_message(const Waiter& w, Job* job) const {
  if (!job) return "job '" + w.job + "' ended while waiting";
  if (w.kind != Kind::kBarrier)
    return "timed out waiting for key(s) " + missing_keys(job->kv, w.keys) + " in job '" + w.job +
           "'";
  auto& b = job->barriers[w.barrier];
  std::string what;
  if (job->global) {
    // Whole subtrees arrive as counts: say how many are missing.
    what = "barrier '" + w.barrier + "' of job '" + w.job +
           "' timed out: " + std::to_string(b.count) + " of " + std::to_string(job->world_size()) +
           " rank(s) arrived";
  } else {
    std::string missing;
    for (uint32_t r = 0; r < job->world_size(); ++r)
      if (!b.arrived.count(r)) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    what = "barrier '" + w.barrier + "' of job '" + w.job + "' timed out waiting for rank(s) " +
           missing;
    b.arrived.erase(w.rank);
  }
  b.count -= std::min<uint64_t>(b.count, w.count);
  return what;
}

void Store::expire(Clock::time_point now, const FindJob& find, Answers& a) {
  while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
    uint64_t id = deadlines_.begin()->second;
    auto it = waiters_.find(id);
    const Waiter& w = it->second;
    Job* job = find(w.to, w.job);
    a.error(w.to, ErrorCode::kTimeout, timeout_message(w, job));
    if (job) {
      // Keep the job's wait lists as short as what is still waiting.
      auto& ids = w.kind == Kind::kBarrier ? job->barriers[w.barrier].waiters : job->key_waiters;
      ids.erase(std::remove(ids.begin(), ids.end(), id), ids.end());
    }
    drop(it);
  }
}

std::vector<uint64_t> Store::forget_client(const std::string& routing_id, const FindJob& find) {
  std::vector<uint64_t> requests;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    const Waiter& w = it->second;
    if (w.kind == Kind::kBarrier || w.to.from_peer || w.to.routing_id != routing_id) {
      ++it;
      continue;
    }
    requests.push_back(w.to.request_id);
    if (Job* job = find(w.to, w.job)) {
      auto& ids = job->key_waiters;
      ids.erase(std::remove(ids.begin(), ids.end(), it->first), ids.end());
    }
    auto next = std::next(it);
    drop(it);
    it = next;
  }
  return requests;
}

void Store::cancel_all(Answers& a) {
  for (auto& [id, w] : waiters_) a.error(w.to, ErrorCode::kShuttingDown, "musterd is stopping");
  waiters_.clear();
  deadlines_.clear();
  stuck_due_.clear();
  stuck_ = 0;
}

}  // namespace muster::daemon
