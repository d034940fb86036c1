// A job's key/value store, the operations that need more than the map's
// own: plain keys and values, no protocol types.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "jobs/key_values.hpp"

namespace muster::daemon {

// What add_to would store under key, without storing it; throws as add_to.
int64_t sum_for_add(const KeyValues& kv, const std::string& key, int64_t delta);

// Adds delta to the decimal integer under key (0 when unset) and stores
// the sum. Throws Error(kInvalidArgument) when the value is not a decimal
// integer or the sum overflows; nothing changes then.
int64_t add_to(KeyValues& kv, const std::string& key, int64_t delta);

// How many keys start with prefix (all of them for "").
size_t count_prefixed(const KeyValues& kv, const std::string& prefix);

// Keys under this prefix are set once: the NCCL unique ids
// (client/lib/nccl_ids.cpp publishes each with compare_set from unset). A
// store refuses to change or delete one that has a value, so a relay may
// keep what it fetched and answer later waits itself (cluster/relays.cpp).
inline constexpr std::string_view kSetOncePrefix = "muster.nccl/";
inline bool set_once(std::string_view key) {
  return key.starts_with(kSetOncePrefix);
}
// Throws Error(kConflict) when key is set once and has a value: the
// request that would change or delete it changes nothing.
void check_changeable(const KeyValues& kv, const std::string& key);
// Throws Error(kConflict) for a set-once key, set or not: a queue's pop
// changes its key when it is answered, which may be long after the check.
void check_not_queue(const std::string& key);

// The keys that are not set, quoted and comma-separated ("'a', 'b'").
std::string missing_keys(const KeyValues& kv, const std::vector<std::string>& keys);

}  // namespace muster::daemon
