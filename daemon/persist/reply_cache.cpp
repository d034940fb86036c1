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
  // A completed barrier is saved too: it must not be entered again.
  const proto::MessageTraits* t = proto::message_traits(type);
  return t && t->kept == proto::Kept::kSaved;
}

namespace {
// Reads' replies are not kept: answering them again is harmless, and their
// replies can be large (values, status, shards).
bool kept(uint16_t type) {
  const proto::MessageTraits* t = proto::message_traits(type);
  return t && t->kept != proto::Kept::kNo;
}
}  // namespace

std::string ReplyCache::client_of(const ReplyTo& to) {
  return to.peer_key.empty() ? to.routing_id : to.routing_id + '\0' + to.peer_key;
}

ReplyCache::Seen ReplyCache::check(const ReplyTo& to, uint64_t h, std::string* reply) {
  if (!tracked(to.routing_id)) return Seen::kNew;
  const std::string client = client_of(to);
  auto c = clients_.find(client);
  // A routing id belongs to the uid it was first seen with: another uid
  // that learned it gets neither its replies nor its place.
  if (c != clients_.end() && c->second.uid != to.peer_uid) return Seen::kForeign;
  auto p = pending_.find({client, to.request_id});
  // A parked request is its sender's too (its client entry may be gone).
  if (p != pending_.end() && p->second.uid != to.peer_uid) return Seen::kForeign;
  if (p != pending_.end() && p->second.hash == h) {
    p->second.conn = to.conn;  // the client reconnected: its reply goes there
    return Seen::kPending;
  }
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
  // First seen: the routing id is this uid's from now on (check()).
  const std::string client = client_of(to);
  auto [c, fresh] = clients_.try_emplace(client);
  ++c->second.pending;
  if (fresh) {
    c->second.uid = to.peer_uid;
    touch(c->first, c->second);
    evict();
  }
  pending_[{client, to.request_id}] = {type, h, to.peer_uid, to.conn};
}

void ReplyCache::forget_pending(const std::string& client, uint64_t request_id) {
  auto p = pending_.find({client, request_id});
  if (p == pending_.end()) return;
  pending_.erase(p);
  if (auto cl = clients_.find(client); cl != clients_.end() && cl->second.pending > 0)
    --cl->second.pending;
}

bool ReplyCache::complete(std::vector<Outgoing>& out) {
  bool changed = false;
  for (auto& o : out) {
    if (!tracked(o.to.routing_id)) continue;
    const std::string client = client_of(o.to);
    auto p = pending_.find({client, o.to.request_id});
    if (p == pending_.end() || p->second.uid != o.to.peer_uid) continue;
    auto [type, h, uid, conn] = p->second;
    o.to.conn = conn;
    pending_.erase(p);
    if (auto cl = clients_.find(client); cl != clients_.end() && cl->second.pending > 0)
      --cl->second.pending;
    if (mutating(type)) changed = true;
    if (kept(type) && !o.held && o.frame.size() <= kMaxFrameBytes) {
      Entry e{o.to.request_id, h, type, o.frame};
      if (mutating(type)) fresh_.push_back({client, o.to.peer_uid, e});
      remember(client, o.to.peer_uid, std::move(e));
    }
  }
  return changed;
}

void ReplyCache::touch(const std::string& client, Client& c) {
  if (c.last_used) {
    by_use_.erase(c.last_used);
    by_uid_[c.uid].erase(c.last_used);
  }
  c.last_used = ++clock_;
  by_use_[c.last_used] = client;
  by_uid_[c.uid][c.last_used] = client;
}

void ReplyCache::remember(const std::string& client, int64_t uid, Entry e) {
  auto [it, fresh] = clients_.try_emplace(client);
  if (fresh) it->second.uid = uid;
  if (it->second.uid != uid) return;  // never another uid's (check() refuses them)
  auto& entries = it->second.entries;
  // A request id answered again (reused for other bytes) replaces the old.
  for (const auto& x : entries)
    if (x.request_id == e.request_id) count(it->second, x, false);
  entries.erase(std::remove_if(entries.begin(), entries.end(),
                               [&](const Entry& x) { return x.request_id == e.request_id; }),
                entries.end());
  count(it->second, e, true);
  entries.push_back(std::move(e));
  if (entries.size() > (uid == -1 ? kPerPeer : kPerClient)) {
    count(it->second, entries.front(), false);
    entries.erase(entries.begin());
  }
  touch(client, it->second);
  evict();
}

void ReplyCache::count(Client& c, const Entry& e, bool add) {
  // The entry's own memory too (its fields, the vector's slot, the
  // string's header): many small replies weigh more than their bytes.
  const uint64_t n = e.frame.size() + kEntryOverhead;
  c.bytes = add ? c.bytes + n : c.bytes - n;
  if (c.uid == -1) peer_bytes_ = add ? peer_bytes_ + n : peer_bytes_ - n;
}

size_t ReplyCache::peers() const {
  auto it = by_uid_.find(-1);
  return it == by_uid_.end() ? 0 : it->second.size();
}

void ReplyCache::evict() {
  evict_local();
  evict_peers();
}

void ReplyCache::evict_local() {
  // Only when the cache is full, least recently used first; a uid holding
  // more than its share gives up its own clients first (one that churns
  // routing ids pushes out no one else's), and a client with a parked
  // request is never dropped: its routing id stays bound to its uid until
  // that is answered. Peer daemons' links (uid -1) count apart
  // (evict_peers): a coordinator of thousands of nodes pushes out no local
  // client, and no local client a node's join.
  while (clients_.size() - peers() > kMaxClients) {
    auto biggest =
        std::max_element(by_uid_.begin(), by_uid_.end(), [](const auto& a, const auto& b) {
          return (a.first == -1 ? 0 : a.second.size()) < (b.first == -1 ? 0 : b.second.size());
        });
    const auto& order =
        biggest != by_uid_.end() && biggest->first != -1 && biggest->second.size() > kMaxPerUid
            ? biggest->second
            : by_use_;
    auto victim = std::find_if(order.begin(), order.end(), [&](const auto& kv) {
      const Client& c = clients_.at(kv.second);
      return c.uid != -1 && c.pending == 0;
    });
    if (victim == order.end()) return;  // all parked: bounded by what waits may cost
    drop(std::string(victim->second));
  }
}

void ReplyCache::evict_peers() {
  while (peers() > kMaxPeers || peer_bytes_ > kMaxPeerBytes) {
    const auto& order = by_uid_.at(-1);
    auto victim = std::find_if(order.begin(), order.end(),
                               [&](const auto& kv) { return clients_.at(kv.second).pending == 0; });
    if (victim == order.end()) return;
    drop(std::string(victim->second));
  }
}

void ReplyCache::drop(const std::string& client) {
  auto it = clients_.find(client);
  if (it == clients_.end()) return;
  by_use_.erase(it->second.last_used);
  auto u = by_uid_.find(it->second.uid);
  u->second.erase(it->second.last_used);
  if (u->second.empty()) by_uid_.erase(u);
  if (it->second.uid == -1) peer_bytes_ -= it->second.bytes;
  clients_.erase(it);
}

void ReplyCache::for_each_saved(
    const std::function<void(const std::string&, int64_t, const Entry&)>& f) const {
  // Least recently used first, so that restoring in this order keeps the
  // same eviction order.
  for (const auto& [t, client] : by_use_)
    for (const auto& e : clients_.at(client).entries)
      if (mutating(e.type)) f(client, clients_.at(client).uid, e);
}

void ReplyCache::restore(const std::string& client, int64_t uid, Entry e) {
  if (!tracked(client)) return;
  remember(client, uid, std::move(e));
}

}  // namespace muster::daemon
