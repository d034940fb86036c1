// A job's key/value store, the operations that need more than the map's
// own: plain keys and values, no protocol types.
#pragma once

#include <cstdint>
#include <string>
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

// The keys that are not set, quoted and comma-separated ("'a', 'b'").
std::string missing_keys(const KeyValues& kv, const std::vector<std::string>& keys);

}  // namespace muster::daemon
