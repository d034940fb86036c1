#include "persist/reply_cache.hpp"

#include <algorithm>
#include <cstring>

namespace muster::daemon {

using proto::MsgType;

namespace {

uint64_t fnv1a(std::string_view bytes, uint64_t h = 14695981039346656037ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL;

uint64_t round64(uint64_t lane, uint64_t word) {
  lane += word * P2;
  lane = (lane << 31) | (lane >> 33);
  return lane * P1;
}

}  // namespace

uint64_t ReplyCache::hash(std::string_view bytes) {
  // FNV-1a runs at a byte per multiply: the 4 MiB chunks of a broadcast
  // across nodes took it 6 ms each, on every daemon they pass. It stays for
  // the first kFnvBytes (the hashes saved states hold are of requests that
  // size: unchanged), and the rest goes 32 bytes at a time in four lanes.
  constexpr size_t kFnvBytes = 64 * 1024;
  const uint64_t head = fnv1a(bytes.substr(0, kFnvBytes));
  if (bytes.size() <= kFnvBytes) return head;
  std::string_view rest = bytes.substr(kFnvBytes);
  uint64_t lanes[4] = {head, head ^ P1, head ^ P2, ~head};
  size_t i = 0;
  for (; i + 32 <= rest.size(); i += 32)
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, rest.data() + i + 8 * k, 8);
      lanes[k] = round64(lanes[k], w);
    }
  uint64_t h = fnv1a(rest.substr(i), rest.size());
  for (uint64_t l : lanes) h = round64(h, l);
  return h;
}

bool ReplyCache::mutating(uint16_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kJoin:
    case MsgType::kLeave:
    case MsgType::kReserve:
    case MsgType::kAttach:
    case MsgType::kStoreSet:
    case MsgType::kStoreAdd:
    case MsgType::kStoreCompareSet:
    case MsgType::kStoreDelete:
    case MsgType::kBarrier:  // a completed barrier must not be entered again
      return true;
    default:
      return false;
  }
}

namespace {
// Reads whose replies are not kept: answering them again is harmless, and
// their replies can be large (values, status, shards).
bool kept(uint16_t type) {
  switch (static_cast<MsgType>(type)) {
    case MsgType::kPing:
    case MsgType::kStatus:
    case MsgType::kShard:
    case MsgType::kStoreGet:
      return false;
    default:
      return true;
  }
}
}  // namespace

ReplyCache::Seen ReplyCache::check(const ReplyTo& to, uint64_t h, std::string* reply) {
  if (!tracked(to.routing_id)) return Seen::kNew;
  if (auto p = pending_.find({to.routing_id, to.request_id});
      p != pending_.end() && p->second.hash == h)
    return Seen::kPending;
  auto c = clients_.find(to.routing_id);
  if (c == clients_.end()) return Seen::kNew;
  for (const auto& e : c->second.entries)
    if (e.request_id == to.request_id && e.hash == h) {
      *reply = e.frame;
      touch(c->first, c->second);
      return Seen::kAnswered;
    }
  return Seen::kNew;
}

void ReplyCache::begin(const ReplyTo& to, uint16_t type, uint64_t h) {
  if (!tracked(to.routing_id)) return;
  pending_[{to.routing_id, to.request_id}] = {type, h};
}

bool ReplyCache::complete(const std::vector<Outgoing>& out) {
  bool changed = false;
  for (const auto& o : out) {
    if (!tracked(o.to.routing_id)) continue;
    auto p = pending_.find({o.to.routing_id, o.to.request_id});
    if (p == pending_.end()) continue;
    auto [type, h] = p->second;
    pending_.erase(p);
    if (mutating(type)) changed = true;
    if (kept(type) && o.frame.size() <= kMaxFrameBytes)
      remember(o.to.routing_id, {o.to.request_id, h, type, o.frame});
  }
  return changed;
}

void ReplyCache::touch(const std::string& client, Client& c) {
  if (c.last_used) by_use_.erase(c.last_used);
  c.last_used = ++clock_;
  by_use_[c.last_used] = client;
}

void ReplyCache::remember(const std::string& client, Entry e) {
  auto [it, fresh] = clients_.try_emplace(client);
  auto& entries = it->second.entries;
  // A request id answered again (reused for other bytes) replaces the old.
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [&](const Entry& x) { return x.request_id == e.request_id; }),
                entries.end());
  entries.push_back(std::move(e));
  if (entries.size() > kPerClient) entries.erase(entries.begin());
  touch(client, it->second);
  while (clients_.size() > kMaxClients) {
    auto oldest = by_use_.begin();
    clients_.erase(oldest->second);
    by_use_.erase(oldest);
  }
}

void ReplyCache::for_each_saved(
    const std::function<void(const std::string&, const Entry&)>& f) const {
  // Least recently used first, so that restoring in this order keeps the
  // same eviction order.
  for (const auto& [t, client] : by_use_)
    for (const auto& e : clients_.at(client).entries)
      if (mutating(e.type)) f(client, e);
}

void ReplyCache::restore(const std::string& client, Entry e) {
  if (!tracked(client)) return;
  remember(client, std::move(e));
}

}  // namespace muster::daemon
