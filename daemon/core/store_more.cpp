// The store requests of torch's newer Store API (protocol/store_messages.hpp)
// and num_keys: decoded here, parked in the Store when they must wait. Every
// change goes through the job's KeyValues, so it is saved as set and add
// are (persist/), and through the quotas when it grows the store.
#include <algorithm>
#include <map>

#include "core/key_values.hpp"
#include "core/out_answers.hpp"
#include "core/queues.hpp"
#include "core/quotas.hpp"
#include "core/state.hpp"
#include "protocol/store_messages.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

Clock::time_point after_ms(int64_t ms) {
  return Clock::now() + std::chrono::milliseconds(ms);
}

// The store after a multi_set, counted as one change against the quotas.
void check_multi_set_quota(const Job& job, const Quotas& q,
                           const std::vector<proto::KeyValue>& items, const State& st) {
  std::map<std::string, size_t> last;  // a key set twice counts once, last value
  for (const auto& kv : items) last[kv.key] = kv.value.size();
  uint64_t keys = job.kv.size(), bytes = job.kv.bytes();
  for (const auto& [k, n] : last) {
    const std::string* old = job.kv.find(k);
    keys += old ? 0 : 1;
    bytes += n + (old ? 0 : k.size()) - (old ? old->size() : 0);
  }
  check_store_growth(job, q, keys, bytes, st);
}

}  // namespace

void State::store_more_request(const ReplyTo& to, const proto::Envelope& env,
                               std::vector<Outgoing>& out) {
  switch (static_cast<MsgType>(env.type)) {
    case MsgType::kStoreNumKeys: {
      auto m = proto::StoreNumKeys::unpack(env.payload);
      Job& job = store_job(to, m.job);
      return reply(to, proto::Int{static_cast<int64_t>(count_prefixed(job.kv, m.prefix))}, out);
    }
    case MsgType::kStoreListKeys: {
      auto m = proto::StoreListKeys::unpack(env.payload);
      Job& job = store_job(to, m.job);
      proto::Values v;
      for (const auto& [k, value] : job.kv)
        if (k.starts_with(m.prefix)) v.items.push_back({k, ""});
      std::sort(v.items.begin(), v.items.end(),
                [](const auto& a, const auto& b) { return a.key < b.key; });
      return reply(to, v, out);
    }
    case MsgType::kStoreAppend: {
      auto m = proto::StoreAppend::unpack(env.payload);
      Job& job = store_job(to, m.job);
      const std::string* old = job.kv.find(m.key);
      return set_key(to, job, m.key, (old ? *old : std::string()) + m.value, out);
    }
    case MsgType::kStoreMultiSet: {
      auto m = proto::StoreMultiSet::unpack(env.payload);
      Job& job = store_job(to, m.job);
      for (const auto& kv : m.items) check_changeable(job.kv, kv.key);
      check_multi_set_quota(job, quotas_, m.items, *this);
      for (auto& kv : m.items) job.kv.set(kv.key, std::move(kv.value));
      reply(to, proto::Ok{}, out);
      return key_changed(job, out);
    }
    case MsgType::kStoreMultiGet: {
      auto m = proto::StoreMultiGet::unpack(env.payload);
      Job& job = store_job(to, m.job);
      std::string missing = missing_keys(job.kv, m.keys);
      if (missing.empty()) {
        proto::Values v;
        for (const auto& k : m.keys) v.items.push_back({"", *job.kv.find(k)});
        return reply(to, v, out);
      }
      if (m.timeout_ms == 0)
        throw Error(ErrorCode::kNotFound, "no key(s) " + missing + " in job '" + m.job + "'");
      check_parked_quota(job, quotas_, key_bytes(m.keys), *this);
      return store_.wait_keys(job, to, Store::KeyWait::kMultiGet, std::move(m.keys),
                              after_ms(m.timeout_ms));
    }
    case MsgType::kStoreQueuePush: {
      auto m = proto::StoreQueuePush::unpack(env.payload);
      Job& job = store_job(to, m.job);
      check_not_queue(m.key);
      return set_key(to, job, m.key, queue_after_push(job.kv, m.key, m.value), out);
    }
    case MsgType::kStoreQueuePop: {
      auto m = proto::StoreQueuePop::unpack(env.payload);
      Job& job = store_job(to, m.job);
      check_not_queue(m.key);
      if (auto item = queue_pop(job.kv, m.key)) return reply(to, proto::Value{*item}, out);
      if (m.timeout_ms == 0)
        throw Error(ErrorCode::kNotFound, "queue '" + m.key + "' of job '" + m.job + "' is empty");
      check_parked_quota(job, quotas_, m.key.size(), *this);
      return store_.wait_keys(job, to, Store::KeyWait::kPop, {m.key}, after_ms(m.timeout_ms));
    }
    case MsgType::kStoreQueueLen: {
      auto m = proto::StoreQueueLen::unpack(env.payload);
      Job& job = store_job(to, m.job);
      return reply(to, proto::Int{static_cast<int64_t>(queue_length(job.kv, m.key))}, out);
    }
    default:
      throw Error(ErrorCode::kInternal, "not a store request");
  }
}

}  // namespace muster::daemon
