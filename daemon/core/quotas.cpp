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

void check_store_growth(const Job& job, const Quotas& q, uint64_t keys, uint64_t bytes) {
  uint64_t keys_now = job.kv.size(), bytes_now = job.kv.bytes();
  if (q.store_keys && keys > q.store_keys && keys > keys_now)
    exceeded("job '" + job.id + "' store holds " + std::to_string(keys_now) +
                 " keys; the change would make it " + std::to_string(keys),
             q.store_keys, "keys per job", "max-store-keys");
  if (q.store_bytes && bytes > q.store_bytes && bytes > bytes_now)
    exceeded("job '" + job.id + "' store would hold " + std::to_string(bytes) +
                 " bytes of keys and values",
             q.store_bytes, "bytes per job", "max-store-bytes");
}

void check_store_quota(const Job& job, const Quotas& q, const std::string& key,
                       size_t value_bytes) {
  const std::string* old = job.kv.find(key);
  uint64_t bytes = job.kv.bytes() - (old ? old->size() : 0) + (old ? 0 : key.size()) + value_bytes;
  check_store_growth(job, q, job.kv.size() + (old ? 0 : 1), bytes);
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
