// Exactly-once requests across lost replies and daemon restarts, each
// client's replies to that client alone.
//
// libmuster sends a request again, with the SAME request id, when its reply
// does not come (the daemon was killed and restarted, the connection
// dropped). Its socket has a routing id of its own choosing, stable for the
// client's life, so the pair (routing id, request id) names one request
// across reconnects. This cache remembers, per client, the replies to its
// last few requests and the requests it still works on (parked waits):
//   - a copy of a request already answered gets the remembered reply again
//     and is not applied twice (StoreAdd, a Join that takes a free slot,
//     Reserve, a Barrier that completed...);
//   - a copy of a request still waiting (StoreGet/StoreWait/Barrier) is
//     dropped: the one reply comes when the wait ends.
// The replies to requests that change state are saved with the state
// (persist/state_file.cpp) before any reply leaves the daemon, so a restarted
// daemon knows them too. Peers that let ZeroMQ pick their routing id (raw
// sockets: the id starts with a zero byte) cannot resend across connections
// and are not tracked.
//
// A routing id is the client's own choice, so it is no secret a uid could
// not learn: each routing id belongs to the uid (SO_PEERCRED) it was first
// seen with, and a request from another uid under it is kForeign, refused
// before anything is looked up (the server also refuses a second live
// connection under a connected client's id: no ROUTER handover).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/state.hpp"

namespace muster::daemon {

class ReplyCache {
 public:
  // Per client; a client has one request in flight (Client is not
  // thread-safe), so a few are plenty.
  static constexpr size_t kPerClient = 4;
  // A peer daemon's link (uid -1: it acts for no local user) carries the
  // requests of all its node's ranks at once: it resends every one still
  // unanswered when its link to a restarted coordinator reconnects.
  static constexpr size_t kPerPeer = 256;
  // Local clients remembered; the least recently active are forgotten first.
  static constexpr size_t kMaxClients = 1024;
  // Peer daemons' links remembered, apart from the local clients: one per
  // node of the jobs this daemon coordinates (12,500 for 100,000 ranks of
  // 8), each of which must find its join answered once when it resends it
  // after a coordinator restart. Bounded in number and in reply bytes, the
  // least recently active forgotten first.
  static constexpr size_t kMaxPeers = 65536;
  static constexpr size_t kMaxPeerBytes = size_t{256} << 20;
  static constexpr size_t kEntryOverhead = 96;  // counted per entry with its reply
  // What a saved state may hold (persist/state_codec.cpp).
  static constexpr size_t kMaxSaved = kMaxClients * kPerClient + kMaxPeers * kPerPeer;
  // A uid's share: when the cache is full, a uid holding more gives up its
  // own clients first, so one that churns routing ids pushes out no one
  // else's (whose resends would then be applied twice). Below the limit a
  // uid may hold any number (a job of 1,000 ranks on a node).
  static constexpr size_t kMaxPerUid = kMaxClients / 2;
  // Larger replies are not kept (they come from requests that are safe to
  // apply again: a compare_set that already happened answers the same).
  static constexpr size_t kMaxFrameBytes = 64 * 1024;

  // The client a request's entries are kept under: its routing id, and for
  // a peer daemon's link also the CURVE key it authenticated with, so that
  // another authorised daemon presenting the same routing id (it is the
  // link's own choice) gets none of its replies. Under peer-plain there is
  // no key to bind: any daemon that reaches the peer port could present
  // another link's routing id (a random 16 bytes each link picks) and take
  // its cached replies; plain peering trusts the network for that too.
  static std::string client_of(const ReplyTo& to);

  struct Entry {
    uint64_t request_id = 0;
    uint64_t hash = 0;  // of the request frame: an id reused for other bytes is new
    uint16_t type = 0;  // of the request
    std::string frame;  // the reply
  };

  enum class Seen { kNew, kPending, kAnswered, kForeign };

  // Stable across builds (it is saved): FNV-1a, 64 bits, over the first 64
  // KiB; beyond, a multiply-rotate round per 8 bytes (reply_cache.cpp).
  static uint64_t hash(std::string_view bytes);
  // Requests whose replies are saved with the state: those that change it.
  static bool mutating(uint16_t type);
  static bool tracked(const std::string& routing_id) {
    return !routing_id.empty() && routing_id[0] != '\0';
  }

  // What to do with a request that just came in; for kAnswered, *reply is
  // the reply to send again. A copy of a pending request (kPending) moves
  // the pending reply to the copy's connection.
  Seen check(const ReplyTo& to, uint64_t hash, std::string* reply);
  // The request is being handled now.
  void begin(const ReplyTo& to, uint16_t type, uint64_t hash);
  // Matches outgoing replies to the requests begun (now or when they were
  // parked), and sends each on the connection that asked last. Returns true
  // when one of them was a mutating request.
  bool complete(std::vector<Outgoing>& out);
  // A parked request given up unanswered (Store::forget_client): a copy
  // sent again is new, and parks again.
  void forget_pending(const std::string& client, uint64_t request_id);

  // For the persister: the entries of mutating requests, and restoring them.
  void for_each_saved(
      const std::function<void(const std::string& client, int64_t uid, const Entry&)>& f) const;
  void restore(const std::string& client, int64_t uid, Entry e);
  // The saved entries remembered since the last call, oldest first: what
  // the change log has yet to hold.
  struct Fresh {
    std::string client;
    int64_t uid;
    Entry e;
  };
  std::vector<Fresh> take_fresh() { return std::exchange(fresh_, {}); }

  size_t pending() const { return pending_.size(); }

 private:
  struct Client {
    int64_t uid = -1;            // the sender's, when first seen
    uint32_t pending = 0;        // its requests still being worked on
    std::vector<Entry> entries;  // oldest first
    uint64_t last_used = 0;
    uint64_t bytes = 0;  // of its entries' replies
  };
  struct Pending {
    uint16_t type = 0;
    uint64_t hash = 0;
    int64_t uid = -1;   // the sender's: only a reply to that uid completes it
    uint64_t conn = 0;  // the connection that asked last (ReplyTo::conn)
  };
  void remember(const std::string& client, int64_t uid, Entry e);
  // Down to kMaxClients local clients and kMaxPeers peers (reply_cache.cpp
  // says which go first).
  void evict();
  void evict_local();
  void evict_peers();
  size_t peers() const;
  void count(Client& c, const Entry& e, bool add);
  void drop(const std::string& client);
  void touch(const std::string& client, Client& c);

  std::map<std::string, Client> clients_;
  std::map<uint64_t, std::string> by_use_;                     // last_used -> client, for eviction
  std::map<int64_t, std::map<uint64_t, std::string>> by_uid_;  // the same, per uid
  std::map<std::pair<std::string, uint64_t>, Pending> pending_;
  uint64_t clock_ = 0;
  uint64_t peer_bytes_ = 0;  // the peers' entries' replies
  std::vector<Fresh> fresh_;
};

}  // namespace muster::daemon
