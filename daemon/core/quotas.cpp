#include "core/quotas.hpp"

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

void check_store_quota(const Job& job, const Quotas& q, const std::string& key,
                       size_t value_bytes) {
  const std::string* old = job.kv.find(key);
  if (!old && q.store_keys && job.kv.size() >= q.store_keys)
    exceeded("job '" + job.id + "' store holds " + std::to_string(job.kv.size()) +
                 " keys; a new key would make it " + std::to_string(job.kv.size() + 1),
             q.store_keys, "keys per job", "max-store-keys");
  uint64_t now = job.kv.bytes();
  uint64_t after = now - (old ? old->size() : 0) + (old ? 0 : key.size()) + value_bytes;
  if (q.store_bytes && after > q.store_bytes && after > now)
    exceeded("job '" + job.id + "' store would hold " + std::to_string(after) +
                 " bytes of keys and values",
             q.store_bytes, "bytes per job", "max-store-bytes");
}

void check_parked_quota(const Job& job, const Quotas& q) {
  // Every wait passes here before it parks: a job whose GPU failed
  // (health.cpp) waits no more, it is told why.
  if (!job.device_failure.empty()) throw Error(ErrorCode::kDeviceFailed, job.device_failure);
  size_t parked = job.key_waiters.size();
  for (const auto& [name, b] : job.barriers) parked += b.waiters.size();
  if (q.parked_waits && parked >= q.parked_waits)
    exceeded("job '" + job.id + "' has " + std::to_string(parked) +
                 " requests parked (store_get, store_wait, barrier)",
             q.parked_waits, "parked requests per job", "max-parked-waits");
}

}  // namespace muster::daemon
