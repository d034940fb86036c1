// torch's store queues (queue_push, queue_pop, queue_len) kept in the job's
// key/value store: a queue is the value of its key, its items each a
// 4-byte little-endian length and the bytes. So a queue is saved, restored,
// counted against the quotas and seen by check and wait exactly like any
// key, and the key exists while the queue is not empty (as in torch).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "jobs/key_values.hpp"

namespace muster::daemon {

// The value key holds after pushing item onto its queue (without storing it).
std::string queue_after_push(const KeyValues& kv, const std::string& key, const std::string& item);
// Items in key's queue (0 when absent). Throws Error(kInvalidArgument)
// when the key holds a value that is not a queue.
uint64_t queue_length(const KeyValues& kv, const std::string& key);
// Takes the first item of key's queue; nullopt when it is empty. Erases the
// key with its last item. Throws as queue_length; nothing changes then.
std::optional<std::string> queue_pop(KeyValues& kv, const std::string& key);

}  // namespace muster::daemon
