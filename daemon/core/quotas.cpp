#include "core/quotas.hpp"

#include <stdexcept>

#include "core/holdings_count.hpp"
#include "job_id.hpp"
#include "log.hpp"
#include "muster/error.hpp"

namespace muster::daemon {

namespace {
[[noreturn]] void exceeded(const std::string& what, uint64_t quota, const char* unit,
                           const char* option) {
  throw Error(ErrorCode::kQuotaExceeded, what + ", over the quota of " + std::to_string(quota) +
                                             " " + unit +
                                             "; nothing was changed (raise it with "
                                             "musterd --" +
                                             option + ", 0 = no limit)");
}
}  // namespace

void derive_ceilings(Quotas& q, bool memory_auto, bool state_auto, int dir_fd) {
  std::string how = "--max-memory";
  if (memory_auto) q.memory = default_memory_ceiling("", &how);
  log::notice("memory ceiling for stores and parked requests: " +
              (q.memory ? std::to_string(q.memory >> 20) + " MiB (" + how + ")" : "none"));
  how = "--max-state-bytes";
  if (state_auto) q.state = default_state_ceiling(dir_fd, &how);
  log::notice("ceiling for the stores the state directory keeps: " +
              (q.state ? std::to_string(q.state >> 20) + " MiB (" + how + ")" : "none"));
}

void parse_ceilings(Quotas& q, const std::string& memory, const std::string& state) {
  bool is_auto = false;
  try {
    q.memory = parse_ceiling(memory, "max-memory", &is_auto);
    q.state = parse_ceiling(state, "max-state-bytes", &is_auto);
  } catch (const std::invalid_argument& e) {
    throw std::runtime_error(e.what());
  }
}

uint64_t key_bytes(const std::vector<std::string>& keys) {
  uint64_t n = 0;
  for (const auto& k : keys) n += k.size();
  return n;
}

int64_t charged_uid(const Job& job) {
  return job.owner_uid >= 0 ? job.owner_uid : job_key_owner(job.id);
}

void check_store_growth(const Job& job, const Quotas& q, uint64_t keys, uint64_t bytes,
                        const HoldingsCount& held) {
  uint64_t keys_now = job.kv.size(), bytes_now = job.kv.bytes();
  if (q.store_keys && keys > q.store_keys && keys > keys_now)
    exceeded("job '" + job.id + "' store holds " + std::to_string(keys_now) +
                 " keys; the change would make it " + std::to_string(keys),
             q.store_keys, "keys per job", "max-store-keys");
  if (q.store_bytes && bytes > q.store_bytes && bytes > bytes_now)
    exceeded("job '" + job.id + "' store would hold " + std::to_string(bytes) +
                 " bytes of keys and values",
             q.store_bytes, "bytes per job", "max-store-bytes");
  const uint64_t before = store_cost(keys_now, bytes_now), after = store_cost(keys, bytes);
  if ((q.memory || q.state) && after > before) {
    const int64_t uid = charged_uid(job);
    const uint64_t memory = after - before, state = bytes > bytes_now ? bytes - bytes_now : 0;
    // Against the bound first; only a refusal is worth an exact count.
    try {
      check_ceilings(q.memory, q.state, held.of(uid), uid, memory, state);
    } catch (const Error&) {
      check_ceilings(q.memory, q.state, held.of(uid, true), uid, memory, state);
    }
    held.grew(uid, memory, state);
  }
}

void check_store_quota(const Job& job, const Quotas& q, const std::string& key, size_t value_bytes,
                       const HoldingsCount& held) {
  const std::string* old = job.kv.find(key);
  uint64_t bytes = job.kv.bytes() - (old ? old->size() : 0) + (old ? 0 : key.size()) + value_bytes;
  check_store_growth(job, q, job.kv.size() + (old ? 0 : 1), bytes, held);
}

void check_parked_quota(const Job& job, const Quotas& q, uint64_t key_bytes,
                        const HoldingsCount& held) {
  // Every wait passes here before it parks: a job whose GPU failed
  // (gpu_health.cpp) waits no more, it is told why.
  if (!job.device_failure.empty()) throw Error(ErrorCode::kDeviceFailed, job.device_failure);
  size_t parked = job.key_waiters.size();
  for (const auto& [name, b] : job.barriers) parked += b.waiters.size();
  if (q.parked_waits && parked >= q.parked_waits)
    exceeded("job '" + job.id + "' has " + std::to_string(parked) +
                 " requests parked (store_get, store_wait, barrier)",
             q.parked_waits, "parked requests per job", "max-parked-waits");
  if (q.memory) {
    const int64_t uid = charged_uid(job);
    try {
      check_ceilings(q.memory, 0, held.of(uid), uid, Store::parked_cost(key_bytes), 0);
    } catch (const Error&) {
      check_ceilings(q.memory, 0, held.of(uid, true), uid, Store::parked_cost(key_bytes), 0);
    }
  }
}

}  // namespace muster::daemon
