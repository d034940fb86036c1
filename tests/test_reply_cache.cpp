// ReplyCache::hash, which tells a resent request (same client, same id)
// from another request reusing its id: the value saved states hold for
// frames up to 64 KiB (FNV-1a) is unchanged, and a byte changed anywhere in
// a larger frame (a broadcast's 4 MiB chunk) changes the hash.
#include <catch2/catch.hpp>

#include <random>
#include <string>

#include "persist/reply_cache.hpp"

using muster::daemon::ReplyCache;

namespace {

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string random_frame(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(g());
  return s;
}

}  // namespace

TEST_CASE("frames up to 64 KiB keep their FNV-1a hash (saved states stay valid)") {
  CHECK(ReplyCache::hash("") == 14695981039346656037ull);
  for (size_t n : {size_t{1}, size_t{100}, size_t{65535}, size_t{65536}}) {
    auto f = random_frame(n, static_cast<uint32_t>(n));
    CHECK(ReplyCache::hash(f) == fnv1a(f));
  }
}

TEST_CASE("a byte changed anywhere in a large frame changes its hash") {
  const size_t n = (size_t{4} << 20) + 13;
  const auto f = random_frame(n, 5);
  const uint64_t h = ReplyCache::hash(f);
  CHECK(ReplyCache::hash(f) == h);  // deterministic
  for (size_t at : {size_t{0}, size_t{65535}, size_t{65536}, size_t{70000}, size_t{1} << 20, n - 14,
                    n - 13, n - 1}) {
    auto g = f;
    g[at] = static_cast<char>(g[at] ^ 0x10);
    INFO("byte " << at);
    CHECK(ReplyCache::hash(g) != h);
  }
  // One byte more or fewer, and two 32-byte groups of the tail swapped.
  CHECK(ReplyCache::hash(f.substr(0, n - 1)) != h);
  CHECK(ReplyCache::hash(f + '\0') != h);
  auto g = f;
  std::swap_ranges(g.begin() + 100000, g.begin() + 100032, g.begin() + 100032);
  CHECK(ReplyCache::hash(g) != h);
}

namespace {

using muster::daemon::Outgoing;
using muster::daemon::ReplyTo;
using muster::proto::MsgType;

ReplyTo client(const std::string& id, int64_t uid, uint64_t request_id, uint64_t conn = 1) {
  ReplyTo to;
  to.routing_id = id;
  to.peer_uid = uid;
  to.request_id = request_id;
  to.conn = conn;
  return to;
}

// A store_add from `to`, answered with `reply`.
void answer(ReplyCache& c, const ReplyTo& to, const std::string& reply) {
  c.begin(to, static_cast<uint16_t>(MsgType::kStoreAdd), 42);
  std::vector<Outgoing> out{{to, reply}};
  c.complete(out);
}

// Request 9 of uid 1000's client rid (its request id 3) parked on
// connection conn, as a store_wait is.
void park(ReplyCache& c, const std::string& rid, uint64_t conn = 1) {
  c.begin(client(rid, 1000, 3, conn), static_cast<uint16_t>(MsgType::kStoreWait), 9);
}

// The connection that park(c, rid, conn)'s reply goes to once it completes.
uint64_t completed_on(ReplyCache& c, const std::string& rid, uint64_t conn) {
  std::vector<Outgoing> out{{client(rid, 1000, 3, conn), "answer"}};
  c.complete(out);
  return out[0].to.conn;
}

}  // namespace

TEST_CASE("a routing id's replies go to the uid it was first seen with, never another") {
  ReplyCache c;
  answer(c, client("mVICTIM", 1000, 7), "the victim's reply");
  std::string again;
  CHECK(c.check(client("mVICTIM", 1000, 7), 42, &again) == ReplyCache::Seen::kAnswered);
  CHECK(again == "the victim's reply");
  again.clear();
  // The same bytes under the same routing id from another uid: refused,
  // for an answered request and for any other.
  CHECK(c.check(client("mVICTIM", 1001, 7), 42, &again) == ReplyCache::Seen::kForeign);
  CHECK(c.check(client("mVICTIM", 0, 8), 43, &again) == ReplyCache::Seen::kForeign);
  CHECK(again.empty());
  // A request still pending is another uid's too.
  park(c, "mPARKED");
  CHECK(c.check(client("mPARKED", 1001, 3), 9, &again) == ReplyCache::Seen::kForeign);
}

TEST_CASE("a peer link's replies are bound to the CURVE key it authenticated with") {
  ReplyCache c;
  auto link = [](const std::string& key, uint64_t request_id) {
    ReplyTo to = client("\x01link-0123456789", -1, request_id);
    to.from_peer = true;
    to.peer_key = key;
    return to;
  };
  const std::string a(40, 'A'), b(40, 'B');
  answer(c, link(a, 7), "node A's reply");
  std::string again;
  CHECK(c.check(link(a, 7), 42, &again) == ReplyCache::Seen::kAnswered);
  CHECK(again == "node A's reply");
  again.clear();
  // Another authorised daemon presenting the same routing id and request:
  // a client of its own, which has nothing to resend.
  CHECK(c.check(link(b, 7), 42, &again) == ReplyCache::Seen::kNew);
  CHECK(again.empty());
  CHECK(ReplyCache::client_of(link(a, 7)) != ReplyCache::client_of(link(b, 7)));
  // Under peer-plain (no key) the routing id alone names the client.
  CHECK(ReplyCache::client_of(link("", 7)) == "\x01link-0123456789");
}

TEST_CASE("a pending reply follows its client to the connection it resent from") {
  ReplyCache c;
  park(c, "mWAITER", 11);
  std::string again;
  CHECK(c.check(client("mWAITER", 1000, 3, 12), 9, &again) == ReplyCache::Seen::kPending);
  CHECK(completed_on(c, "mWAITER", 11) == 12);
}

TEST_CASE("a uid that churns routing ids evicts its own clients, not another uid's") {
  ReplyCache c;
  answer(c, client("mVICTIM", 1000, 7), "kept");
  for (int i = 0; i < 3 * static_cast<int>(ReplyCache::kMaxClients); ++i)
    answer(c, client("mCHURN" + std::to_string(i), 1001, 1), "churn");
  std::string again;
  CHECK(c.check(client("mVICTIM", 1000, 7), 42, &again) == ReplyCache::Seen::kAnswered);
  CHECK(again == "kept");
  // The churner keeps its most recent kMaxPerUid clients.
  CHECK(c.check(client("mCHURN" + std::to_string(3 * ReplyCache::kMaxClients - 1), 1001, 1), 42,
                &again) == ReplyCache::Seen::kAnswered);
  CHECK(c.check(client("mCHURN0", 1001, 1), 42, &again) == ReplyCache::Seen::kNew);
}

TEST_CASE("a parked request keeps its routing id bound to its uid through any churn") {
  ReplyCache c;
  park(c, "mPARKED", 5);
  for (int i = 0; i < 3 * static_cast<int>(ReplyCache::kMaxClients); ++i)
    answer(c, client("mCHURN" + std::to_string(i), 1001 + i % 3, 1), "churn");
  std::string again;
  // Another uid resending the parked request's bytes neither takes its
  // reply nor its routing id.
  CHECK(c.check(client("mPARKED", 1001, 3, 99), 9, &again) == ReplyCache::Seen::kForeign);
  CHECK(c.check(client("mPARKED", 1001, 4, 99), 10, &again) == ReplyCache::Seen::kForeign);
  CHECK(c.check(client("mPARKED", 1000, 3, 6), 9, &again) == ReplyCache::Seen::kPending);
  CHECK(completed_on(c, "mPARKED", 5) == 6);
}

TEST_CASE("one uid's 1,000 clients all keep their replies while the cache has room") {
  // A job of 1,000 ranks on one node: a resent store_add must be answered
  // from the cache, never applied again.
  ReplyCache c;
  for (int i = 0; i < 1000; ++i) answer(c, client("mRANK" + std::to_string(i), 0, 1), "ticket");
  std::string again;
  for (int i = 0; i < 1000; ++i)
    CHECK(c.check(client("mRANK" + std::to_string(i), 0, 1), 42, &again) ==
          ReplyCache::Seen::kAnswered);
}

TEST_CASE("a coordinator of 12,500 nodes answers each node's resent request once") {
  // 100,000 ranks of 8: one peer link (uid -1) per node. Each must find its
  // reply when it resends after a coordinator restart (a join applied twice
  // would restart the world), however many local clients come and go.
  ReplyCache c;
  for (int i = 0; i < 12500; ++i) answer(c, client("PNODE" + std::to_string(i), -1, 2), "world");
  for (int i = 0; i < 3 * static_cast<int>(ReplyCache::kMaxClients); ++i)
    answer(c, client("mLOCAL" + std::to_string(i), 1000 + i % 3, 1), "local");
  std::string again;
  int kept = 0;
  for (int i = 0; i < 12500; ++i)
    kept += c.check(client("PNODE" + std::to_string(i), -1, 2), 42, &again) ==
            ReplyCache::Seen::kAnswered;
  CHECK(kept == 12500);
  CHECK(again == "world");
  // The peers pushed out no local client either: the last kMaxClients are kept.
  const int last = 3 * static_cast<int>(ReplyCache::kMaxClients) - 1;
  CHECK(c.check(client("mLOCAL" + std::to_string(last), 1000 + last % 3, 1), 42, &again) ==
        ReplyCache::Seen::kAnswered);
}

TEST_CASE("peer links are bounded in number and in reply bytes, the oldest forgotten first") {
  ReplyCache c;
  std::string again;
  for (int i = 0; i <= static_cast<int>(ReplyCache::kMaxPeers); ++i)
    answer(c, client("PNODE" + std::to_string(i), -1, 2), "w");
  CHECK(c.check(client("PNODE0", -1, 2), 42, &again) == ReplyCache::Seen::kNew);
  CHECK(c.check(client("PNODE1", -1, 2), 42, &again) == ReplyCache::Seen::kAnswered);

  ReplyCache big;
  const std::string reply(ReplyCache::kMaxFrameBytes, 'r');
  const size_t fit = ReplyCache::kMaxPeerBytes / (reply.size() + ReplyCache::kEntryOverhead);
  for (size_t i = 0; i <= fit; ++i) answer(big, client("PBIG" + std::to_string(i), -1, 2), reply);
  CHECK(big.check(client("PBIG0", -1, 2), 42, &again) == ReplyCache::Seen::kNew);
  CHECK(big.check(client("PBIG1", -1, 2), 42, &again) == ReplyCache::Seen::kAnswered);
  CHECK(big.check(client("PBIG" + std::to_string(fit), -1, 2), 42, &again) ==
        ReplyCache::Seen::kAnswered);
}
