// The store and barrier requests: decoded here, parked in the Store when
// they must wait.
#include <algorithm>

#include "core/key_values.hpp"
#include "core/out_answers.hpp"
#include "core/quotas.hpp"
#include "core/state.hpp"

namespace muster::daemon {

using proto::MsgType;

void State::store_request(const ReplyTo& to, const proto::Envelope& env,
                          std::vector<Outgoing>& out) {
  auto now = Clock::now();
  switch (static_cast<MsgType>(env.type)) {
    case MsgType::kStoreSet: {
      auto m = proto::StoreSet::unpack(env.payload);
      return set_key(to, store_job(to, m.job), m.key, std::move(m.value), out);
    }
    case MsgType::kStoreGet: {
      auto m = proto::StoreGet::unpack(env.payload);
      Job& job = store_job(to, m.job);
      if (const std::string* v = job.kv.find(m.key)) return reply(to, proto::Value{*v}, out);
      if (m.timeout_ms == 0)
        throw Error(ErrorCode::kNotFound, "no key '" + m.key + "' in job '" + m.job + "'");
      check_parked_quota(job, quotas_, m.key.size(), *this);
      store_.wait_keys(job, to, Store::KeyWait::kGet, {m.key},
                       now + std::chrono::milliseconds(m.timeout_ms));
      return;
    }
    case MsgType::kStoreAdd: {
      auto m = proto::StoreAdd::unpack(env.payload);
      Job& job = store_job(to, m.job);
      check_changeable(job.kv, m.key);
      int64_t sum = sum_for_add(job.kv, m.key, m.delta);
      check_store_quota(job, quotas_, m.key, std::to_string(sum).size(), *this);
      job.kv.set(m.key, std::to_string(sum));
      reply(to, proto::Int{sum}, out);
      key_changed(job, out);
      return;
    }
    case MsgType::kStoreCompareSet: {
      auto m = proto::StoreCompareSet::unpack(env.payload);
      Job& job = store_job(to, m.job);
      const std::string* now = job.kv.find(m.key);
      if (!now) {
        if (!m.expected.empty()) return reply(to, proto::Value{m.expected}, out);
        check_store_quota(job, quotas_, m.key, m.desired.size(), *this);
        job.kv.set(m.key, m.desired);
      } else if (*now == m.expected && m.desired != *now) {
        check_changeable(job.kv, m.key);
        check_store_quota(job, quotas_, m.key, m.desired.size(), *this);
        job.kv.set(m.key, m.desired);
      }
      reply(to, proto::Value{*job.kv.find(m.key)}, out);
      key_changed(job, out);
      return;
    }
    case MsgType::kStoreDelete: {
      auto m = proto::StoreDelete::unpack(env.payload);
      Job& job = store_job(to, m.job);
      check_changeable(job.kv, m.key);
      reply(to, proto::Bool{job.kv.erase(m.key)}, out);
      return;
    }
    case MsgType::kStoreWait: {
      auto m = proto::StoreWait::unpack(env.payload);
      Job& job = store_job(to, m.job);
      if (job.has_all(m.keys)) return reply(to, proto::Ok{}, out);
      if (m.timeout_ms == 0)
        throw Error(ErrorCode::kTimeout,
                    "key(s) " + missing_keys(job.kv, m.keys) + " not set in job '" + m.job + "'");
      check_parked_quota(job, quotas_, key_bytes(m.keys), *this);
      store_.wait_keys(job, to, Store::KeyWait::kWait, std::move(m.keys),
                       now + std::chrono::milliseconds(m.timeout_ms));
      return;
    }
    default:
      return store_more_request(to, env, out);
  }
}

void State::key_changed(Job& job, std::vector<Outgoing>& out) {
  OutAnswers a(out);
  store_.key_changed(job, a);
}

void State::set_key(const ReplyTo& to, Job& job, const std::string& key, std::string value,
                    std::vector<Outgoing>& out) {
  check_changeable(job.kv, key);
  check_store_quota(job, quotas_, key, value.size(), *this);
  job.kv.set(key, std::move(value));
  reply(to, proto::Ok{}, out);
  key_changed(job, out);
}

void State::barrier(const ReplyTo& to, const proto::Barrier& m, std::vector<Outgoing>& out) {
  Job& job = store_job(to, m.job);
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
  for (uint32_t r = 0; r < job.slots.size() && !job.global; ++r)
    if (job.slots[r].state == SlotState::kExited)
      throw Error(ErrorCode::kPeerExited, "barrier '" + m.name + "' of job '" + m.job +
                                              "' cannot complete: rank " + std::to_string(r) +
                                              " has exited");
  // An arrival that does not fill the barrier parks (checked before the
  // barrier is looked up, which would create it).
  auto in = job.barriers.find(m.name);
  if ((in == job.barriers.end() ? 0 : in->second.count) + 1 < job.world_size())
    check_parked_quota(job, quotas_, m.name.size(), *this);
  auto& b = job.barriers[m.name];
  if (b.arrived.count(m.rank))
    throw Error(ErrorCode::kConflict, "rank " + std::to_string(m.rank) +
                                          " is already waiting in barrier '" + m.name + "'");
  b.arrived.insert(m.rank);
  OutAnswers a(out);
  store_.arrive(job, to, m.name, m.rank, 1, job.world_size(),
                Clock::now() + std::chrono::milliseconds(m.timeout_ms), a);
}

}  // namespace muster::daemon
