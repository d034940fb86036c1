#include "core/key_values.hpp"

#include <charconv>

#include "muster/error.hpp"

namespace muster::daemon {

int64_t sum_for_add(const KeyValues& kv, const std::string& key, int64_t delta) {
  int64_t v = 0;
  if (const std::string* found = kv.find(key)) {
    const auto& s = *found;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size())
      throw Error(ErrorCode::kInvalidArgument,
                  "key '" + key + "' does not hold a decimal integer; add() cannot use it");
  }
  if (__builtin_add_overflow(v, delta, &v))
    throw Error(ErrorCode::kInvalidArgument, "add() on key '" + key + "' would overflow");
  return v;
}

int64_t add_to(KeyValues& kv, const std::string& key, int64_t delta) {
  int64_t v = sum_for_add(kv, key, delta);
  kv.set(key, std::to_string(v));
  return v;
}

size_t count_prefixed(const KeyValues& kv, const std::string& prefix) {
  if (prefix.empty()) return kv.size();
  size_t n = 0;
  for (const auto& [k, v] : kv) n += k.starts_with(prefix) ? 1 : 0;
  return n;
}

void check_changeable(const KeyValues& kv, const std::string& key) {
  if (!set_once(key) || !kv.contains(key)) return;
  throw Error(ErrorCode::kConflict,
              "key '" + key + "' is set once (keys under '" + std::string(kSetOncePrefix) +
                  "' hold NCCL unique ids, which relays keep); it cannot be changed or deleted");
}

void check_not_queue(const std::string& key) {
  if (!set_once(key)) return;
  throw Error(ErrorCode::kConflict, "key '" + key + "' is set once (keys under '" +
                                        std::string(kSetOncePrefix) +
                                        "' hold NCCL unique ids); it cannot be a queue");
}

std::string missing_keys(const KeyValues& kv, const std::vector<std::string>& keys) {
  std::string missing;
  for (const auto& k : keys)
    if (!kv.contains(k)) missing += (missing.empty() ? "'" : ", '") + k + "'";
  return missing;
}

}  // namespace muster::daemon
