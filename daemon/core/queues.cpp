#include "core/queues.hpp"

#include "muster/error.hpp"

namespace muster::daemon {

namespace {

constexpr size_t kHead = 4;

uint32_t item_bytes(const std::string& q, size_t at) {
  uint32_t n = 0;
  for (size_t i = 0; i < kHead; ++i)
    n |= static_cast<uint32_t>(static_cast<unsigned char>(q[at + i])) << (8 * i);
  return n;
}

// The items of q, each checked to fit; throws for a value that is no queue.
uint64_t count_items(const std::string& key, const std::string& q) {
  uint64_t n = 0;
  for (size_t at = 0; at < q.size(); ++n) {
    if (q.size() - at < kHead || q.size() - at - kHead < item_bytes(q, at))
      throw Error(ErrorCode::kInvalidArgument,
                  "key '" + key + "' holds a value that is not a queue (set, not queue_push)");
    at += kHead + item_bytes(q, at);
  }
  return n;
}

}  // namespace

std::string queue_after_push(const KeyValues& kv, const std::string& key, const std::string& item) {
  const std::string* q = kv.find(key);
  if (q) count_items(key, *q);
  std::string after = q ? *q : std::string();
  auto n = static_cast<uint32_t>(item.size());
  for (size_t i = 0; i < kHead; ++i) after.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return after + item;
}

uint64_t queue_length(const KeyValues& kv, const std::string& key) {
  const std::string* q = kv.find(key);
  return q ? count_items(key, *q) : 0;
}

std::optional<std::string> queue_pop(KeyValues& kv, const std::string& key) {
  const std::string* q = kv.find(key);
  if (!q) return std::nullopt;
  count_items(key, *q);
  uint32_t n = item_bytes(*q, 0);
  std::string item = q->substr(kHead, n);
  std::string rest = q->substr(kHead + n);
  if (rest.empty())
    kv.erase(key);
  else
    kv.set(key, std::move(rest));
  return item;
}

}  // namespace muster::daemon
