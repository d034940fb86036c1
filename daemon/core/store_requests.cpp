// The store and barrier requests: decoded here, parked in the Store when
// they must wait. Every change goes through the job's KeyValues, so it is
// saved as it is made (persist/), and through the quotas when it grows the
// store.
#include "core/store_requests.hpp"

#include <algorithm>
#include <map>

#include "core/key_values.hpp"
#include "core/out_answers.hpp"
#include "core/queues.hpp"
#include "protocol/store_messages.hpp"

namespace muster::daemon {

namespace {

Clock::time_point after_ms(int64_t ms) {
  return Clock::now() + std::chrono::milliseconds(ms);
}

// The store after a multi_set, counted as one change against the quotas.
void check_multi_set_quota(const Job& job, const Quotas& q,
                           const std::vector<proto::KeyValue>& items, const HoldingsCount& held) {
  std::map<std::string, size_t> last;  // a key set twice counts once, last value
  for (const auto& kv : items) last[kv.key] = kv.value.size();
  uint64_t keys = job.kv.size(), bytes = job.kv.bytes();
  for (const auto& [k, n] : last) {
    const std::string* old = job.kv.find(k);
    keys += old ? 0 : 1;
    bytes += n + (old ? 0 : k.size()) - (old ? old->size() : 0);
  }
  check_store_growth(job, q, keys, bytes, held);
}

}  // namespace

StoreRequests::StoreRequests(Store& store, const Quotas& quotas, const HoldingsCount& holdings,
                             FindJob find)
    : store_(store), quotas_(quotas), holdings_(holdings), find_(std::move(find)) {}

void StoreRequests::key_changed(Job& job, std::vector<Outgoing>& out) {
  OutAnswers a(out);
  store_.key_changed(job, a);
}

void StoreRequests::set_key(const Request& r, Job& job, const std::string& key, std::string value) {
  check_changeable(job.kv, key);
  check_store_quota(job, quotas_, key, value.size(), holdings_);
  job.kv.set(key, std::move(value));
  r.reply(proto::Ok{});
  key_changed(job, r.out);
}

void StoreRequests::park(const Request& r, Job& job, Store::KeyWait kind,
                         std::vector<std::string> keys, int64_t timeout_ms, Error none) {
  if (timeout_ms == 0) throw none;
  check_parked_quota(job, quotas_, key_bytes(keys), holdings_);
  store_.wait_keys(job, r.to, kind, std::move(keys), after_ms(timeout_ms));
}

void StoreRequests::set(const Request& r) {
  auto m = r.unpack<proto::StoreSet>();
  set_key(r, find_(r.to, m.job), m.key, std::move(m.value));
}

void StoreRequests::get(const Request& r) {
  auto m = r.unpack<proto::StoreGet>();
  Job& job = find_(r.to, m.job);
  if (const std::string* v = job.kv.find(m.key)) return r.reply(proto::Value{*v});
  park(r, job, Store::KeyWait::kGet, {m.key}, m.timeout_ms,
       Error(ErrorCode::kNotFound, "no key '" + m.key + "' in job '" + m.job + "'"));
}

void StoreRequests::add(const Request& r) {
  auto m = r.unpack<proto::StoreAdd>();
  Job& job = find_(r.to, m.job);
  check_changeable(job.kv, m.key);
  int64_t sum = sum_for_add(job.kv, m.key, m.delta);
  check_store_quota(job, quotas_, m.key, std::to_string(sum).size(), holdings_);
  job.kv.set(m.key, std::to_string(sum));
  r.reply(proto::Int{sum});
  key_changed(job, r.out);
}

void StoreRequests::compare_set(const Request& r) {
  auto m = r.unpack<proto::StoreCompareSet>();
  Job& job = find_(r.to, m.job);
  const std::string* now = job.kv.find(m.key);
  if (!now) {
    if (!m.expected.empty()) return r.reply(proto::Value{m.expected});
    check_store_quota(job, quotas_, m.key, m.desired.size(), holdings_);
    job.kv.set(m.key, m.desired);
  } else if (*now == m.expected && m.desired != *now) {
    check_changeable(job.kv, m.key);
    check_store_quota(job, quotas_, m.key, m.desired.size(), holdings_);
    job.kv.set(m.key, m.desired);
  }
  r.reply(proto::Value{*job.kv.find(m.key)});
  key_changed(job, r.out);
}

void StoreRequests::erase(const Request& r) {
  auto m = r.unpack<proto::StoreDelete>();
  Job& job = find_(r.to, m.job);
  check_changeable(job.kv, m.key);
  r.reply(proto::Bool{job.kv.erase(m.key)});
}

void StoreRequests::wait(const Request& r) {
  auto m = r.unpack<proto::StoreWait>();
  Job& job = find_(r.to, m.job);
  if (job.has_all(m.keys)) return r.reply(proto::Ok{});
  Error none(ErrorCode::kTimeout,
             "key(s) " + missing_keys(job.kv, m.keys) + " not set in job '" + m.job + "'");
  park(r, job, Store::KeyWait::kWait, std::move(m.keys), m.timeout_ms, std::move(none));
}

void StoreRequests::num_keys(const Request& r) {
  auto m = r.unpack<proto::StoreNumKeys>();
  const auto n = count_prefixed(find_(r.to, m.job).kv, m.prefix);
  r.reply(proto::Int{static_cast<int64_t>(n)});
}

void StoreRequests::list_keys(const Request& r) {
  auto m = r.unpack<proto::StoreListKeys>();
  Job& job = find_(r.to, m.job);
  proto::Values v;
  for (const auto& [k, value] : job.kv)
    if (k.starts_with(m.prefix)) v.items.push_back({k, ""});
  std::sort(v.items.begin(), v.items.end(),
            [](const auto& a, const auto& b) { return a.key < b.key; });
  r.reply(v);
}

void StoreRequests::append(const Request& r) {
  auto m = r.unpack<proto::StoreAppend>();
  Job& job = find_(r.to, m.job);
  const std::string* old = job.kv.find(m.key);
  set_key(r, job, m.key, (old ? *old : std::string()) + m.value);
}

void StoreRequests::multi_set(const Request& r) {
  auto m = r.unpack<proto::StoreMultiSet>();
  Job& job = find_(r.to, m.job);
  for (const auto& kv : m.items) check_changeable(job.kv, kv.key);
  check_multi_set_quota(job, quotas_, m.items, holdings_);
  for (auto& kv : m.items) job.kv.set(kv.key, std::move(kv.value));
  r.reply(proto::Ok{});
  key_changed(job, r.out);
}

void StoreRequests::multi_get(const Request& r) {
  auto m = r.unpack<proto::StoreMultiGet>();
  Job& job = find_(r.to, m.job);
  std::string missing = missing_keys(job.kv, m.keys);
  if (missing.empty()) {
    proto::Values v;
    for (const auto& k : m.keys) v.items.push_back({"", *job.kv.find(k)});
    return r.reply(v);
  }
  park(r, job, Store::KeyWait::kMultiGet, std::move(m.keys), m.timeout_ms,
       Error(ErrorCode::kNotFound, "no key(s) " + missing + " in job '" + m.job + "'"));
}

void StoreRequests::queue_push(const Request& r) {
  auto m = r.unpack<proto::StoreQueuePush>();
  Job& job = find_(r.to, m.job);
  check_not_queue(m.key);
  set_key(r, job, m.key, queue_after_push(job.kv, m.key, m.value));
}

void StoreRequests::queue_pop(const Request& r) {
  auto m = r.unpack<proto::StoreQueuePop>();
  Job& job = find_(r.to, m.job);
  check_not_queue(m.key);
  if (auto item = daemon::queue_pop(job.kv, m.key)) return r.reply(proto::Value{*item});
  park(r, job, Store::KeyWait::kPop, {m.key}, m.timeout_ms,
       Error(ErrorCode::kNotFound, "queue '" + m.key + "' of job '" + m.job + "' is empty"));
}

void StoreRequests::queue_len(const Request& r) {
  auto m = r.unpack<proto::StoreQueueLen>();
  r.reply(proto::Int{static_cast<int64_t>(queue_length(find_(r.to, m.job).kv, m.key))});
}

void StoreRequests::barrier(const Request& r) {
  auto m = r.unpack<proto::Barrier>();
  Job& job = find_(r.to, m.job);
  if (m.rank >= job.world_size())
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(m.rank) +
                                                 " is outside job '" + m.job + "' of world size " +
                                                 std::to_string(job.world_size()));
  if (job.global) {
    // The coordinator's store of a multi-node job: ranks live elsewhere;
    // their daemons report exits (RankExited).
    if (!job.exited_ranks.empty())
      throw Error(ErrorCode::kPeerExited,
                  "barrier '" + m.name + "' of job '" + m.job + "' cannot complete: rank " +
                      std::to_string(*job.exited_ranks.begin()) + " has exited");
  } else if (!slot_live(job.slots[m.rank].state))
    throw Error(ErrorCode::kPeerExited, "rank " + std::to_string(m.rank) + " of job '" + m.job +
                                            "' is " + slot_state_name(job.slots[m.rank].state));
  for (uint32_t i = 0; i < job.slots.size() && !job.global; ++i)
    if (job.slots[i].state == SlotState::kExited)
      throw Error(ErrorCode::kPeerExited, "barrier '" + m.name + "' of job '" + m.job +
                                              "' cannot complete: rank " + std::to_string(i) +
                                              " has exited");
  // An arrival that does not fill the barrier parks (checked before the
  // barrier is looked up, which would create it).
  auto in = job.barriers.find(m.name);
  if ((in == job.barriers.end() ? 0 : in->second.count) + 1 < job.world_size())
    check_parked_quota(job, quotas_, m.name.size(), holdings_);
  auto& b = job.barriers[m.name];
  if (b.arrived.count(m.rank))
    throw Error(ErrorCode::kConflict, "rank " + std::to_string(m.rank) +
                                          " is already waiting in barrier '" + m.name + "'");
  b.arrived.insert(m.rank);
  OutAnswers a(r.out);
  store_.arrive(job, r.to, m.name, m.rank, 1, job.world_size(), after_ms(m.timeout_ms), a);
}

}  // namespace muster::daemon
