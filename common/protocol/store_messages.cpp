// The field lists of the newer store requests (store_messages.hpp).
#include "protocol/store_messages.hpp"

#include <algorithm>

#include "protocol/fields.hpp"
#include "protocol/limits.hpp"

namespace muster::proto {

namespace {
template <class IO>
void some_keys(IO& io, std::vector<std::string>& keys, const char* what) {
  io.strs("keys", keys, limits::kMaxWaitKeys, limits::kMaxStoreKeyBytes);
  io.check([&] {
    if (keys.empty())
      throw Error(ErrorCode::kInvalidArgument, std::string(what) + " needs at least one key");
    wire::check_store_keys(keys);
  });
}
}  // namespace

template <class IO>
void KeyValue::fields(IO& io) {
  // A reply's list_keys items carry no value, multi_get's no key: both
  // may be empty here; requests check their keys themselves.
  io.str("key", key, limits::kMaxStoreKeyBytes);
  io.bin("value", value, limits::kMaxValueBytes);
}

template <class IO>
void StoreMultiSet::fields(IO& io) {
  fenced(io, *this, [&] { io.list("items", items, limits::kMaxWaitKeys); });
  io.check([&] {
    if (items.empty())
      throw Error(ErrorCode::kInvalidArgument, "store_multi_set needs at least one key");
    for (const auto& kv : items) wire::check_store_key(kv.key);
  });
}

template <class IO>
void StoreMultiGet::fields(IO& io) {
  fenced(io, *this, [&] {
    some_keys(io, keys, "store_multi_get");
    io.ms("timeout_ms", timeout_ms);
  });
}

template <class IO>
void Values::fields(IO& io) {
  // A frame bounds the bytes; the count is bounded like a frame's objects.
  io.list("items", items, limits::kMaxFrameObjects);
}

MUSTER_CODEC(StoreMultiSet)
MUSTER_CODEC(StoreMultiGet)
MUSTER_CODEC(Values)

}  // namespace muster::proto
