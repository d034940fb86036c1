// The store requests of torch's newer Store API (Store.append, multi_get,
// multi_set, queue_push/queue_pop/queue_len, list_keys) and their reply.
// Like the first six (messages.hpp), each names the job, may carry a
// generation fence, and goes to the job's coordinator across nodes.
#pragma once

#include "protocol/messages.hpp"

namespace muster::proto {

// Appends value to key's value (an absent key is created), torch's append.
using StoreAppend = KeyValueRequest<MsgType::kStoreAppend>;

// One key and its value, of a multi_set or a reply's list.
struct KeyValue {
  std::string key;
  std::string value;
  MUSTER_FIELDS;
  bool operator==(const KeyValue&) const = default;
};

// Sets every key to its value, all in one step (1..1024 items).
struct StoreMultiSet {
  std::string job;
  std::vector<KeyValue> items;
  GenerationFence generation = std::nullopt;
  MUSTER_MESSAGE(StoreMultiSet);
};

// The values of keys, in order, waiting (up to timeout_ms) until all are
// set, as torch's multi_get; timeout_ms = 0: not_found at once.
struct StoreMultiGet {
  std::string job;
  std::vector<std::string> keys;
  int64_t timeout_ms = 0;
  GenerationFence generation = std::nullopt;
  MUSTER_MESSAGE(StoreMultiGet);
};

// Appends value to the queue at key (the key exists while the queue is not
// empty, so check and wait see it, as in torch).
using StoreQueuePush = KeyValueRequest<MsgType::kStoreQueuePush>;

// Takes the queue's first value, waiting up to timeout_ms for one;
// timeout_ms = 0: not_found at once when the queue is empty.
using StoreQueuePop = KeyWaitRequest<MsgType::kStoreQueuePop>;

using StoreQueueLen = KeyRequest<MsgType::kStoreQueueLen>;

// The keys that start with prefix ("" = all), sorted.
using StoreListKeys = PrefixRequest<MsgType::kStoreListKeys>;

// multi_get's values (keys left empty) or list_keys' keys (values empty).
struct Values {
  std::vector<KeyValue> items;
  MUSTER_MESSAGE(Values);
};

}  // namespace muster::proto
