// The coordinator's relay of broadcasts across nodes (daemon/cluster/
// relayed_broadcasts.cpp), driven through daemon::State with no sockets: three
// nodes of two ranks form a world, then Forwards carry bcast_push,
// bcast_pull and bcast_leave as the daemons would. Checks the window (a
// push is answered only when there is room), chunks going out while later
// ones arrive, and failures reaching every waiting request.
#include <catch2/catch.hpp>
#include <chrono>

#include "cluster/multi_node.hpp"
#include "core/state.hpp"
#include "protocol/cluster_messages.hpp"
#include "support/replies.hpp"

using namespace muster;
using namespace muster::daemon;
using namespace muster::proto;
using namespace std::chrono_literals;

namespace {

constexpr uint64_t kChunk = kMaxBcastChunk;   // 16 MiB: a window of 2 chunks
constexpr uint64_t kSize = 5 * kChunk + 100;  // 6 chunks

std::string chunk_bytes(uint64_t k) {
  return std::string(k == 5 ? 100 : kChunk, static_cast<char>('a' + k));
}

struct Reply : test::ReplyHead {
  BcastChunk chunk;
  std::string value;
};

struct CoordDaemon {
  PidWatch watch;
  State s{{}, watch};
  uint64_t next = 1000;

  CoordDaemon() {
    s.cluster().configure("coord", 2000ms, "", 16);
    std::vector<Reply> worlds;
    for (uint32_t n = 0; n < 3; ++n) {
      NodeJoin j{"j", "node" + std::to_string(n), 2, n, 3, 3, 0, 60000, "127.0.0.1", 1, ""};
      auto out = send("node" + std::to_string(n), j);
      worlds.insert(worlds.end(), out.begin(), out.end());
    }
    REQUIRE(worlds.size() == 3);
    for (auto& w : worlds) REQUIRE(w.type == static_cast<uint16_t>(MsgType::kWorld));
  }

  template <class M>
  std::vector<Reply> send(const std::string& node, const M& m, uint64_t id = 0) {
    if (!id) id = next++;
    ReplyTo from;
    from.routing_id = node;
    from.from_peer = true;
    return replies(test::handle_frame(s, from, encode(id, m)));
  }
  // What the node daemons pass on for their ranks.
  template <class M>
  std::vector<Reply> fwd(const std::string& node, const M& m, uint64_t id) {
    return send(node, Forward{"j", 0, encode(0, m)}, id);
  }
  std::vector<Reply> tick(std::chrono::milliseconds later) {
    std::vector<Outgoing> out;
    s.cluster().tick(Clock::now() + later, out);
    std::vector<Reply> r;
    for (auto& x : replies(out))
      if (x.type != static_cast<uint16_t>(MsgType::kHeartbeat)) r.push_back(x);
    return r;
  }

  static std::vector<Reply> replies(const std::vector<Outgoing>& out) {
    std::vector<Reply> r;
    for (const auto& o : out) {
      // A shared chunk frame is sent as `body`, kept alive by `held`.
      std::string_view f = o.frame.empty() ? o.body : std::string_view(o.frame);
      auto env = decode_envelope(f.data(), f.size());
      Reply x;
      static_cast<test::ReplyHead&>(x) = test::reply_head(o, env);
      if (env.type == static_cast<uint16_t>(MsgType::kBcastChunk)) {
        x.chunk = BcastChunk::unpack(env.payload);
      } else if (env.type == static_cast<uint16_t>(MsgType::kValue)) {
        x.value = Value::unpack(env.payload).value;
      }
      r.push_back(std::move(x));
    }
    return r;
  }
};

// Root: rank 1 (node 0). Pulling: nodes 1 and 2.
BcastPush push(uint64_t k, uint64_t seq = 1) {
  return {"j", 0, seq, 1, kSize, kChunk, k, 1000 + k, chunk_bytes(k), 60000};
}
BcastPull pull(uint32_t node, uint64_t have, uint64_t index, int64_t timeout_ms = 60000) {
  return {"j", 0, 1, 1, node, kSize, kChunk, have, index, timeout_ms};
}
BcastLeave leave(uint32_t node, std::string why = "") {
  return {"j", 0, 1, 1, node, kSize, kChunk, std::move(why)};
}

bool is_ok(const Reply& r) {
  return r.type == static_cast<uint16_t>(MsgType::kOk);
}
bool is_chunk(const Reply& r, uint64_t k) {
  return r.type == static_cast<uint16_t>(MsgType::kBcastChunk) && r.chunk.index == k &&
         r.chunk.sum == 1000 + k && r.chunk.data == chunk_bytes(k);
}

}  // namespace

TEST_CASE("the relay answers pushes when the window has room and chunks as they arrive",
          "[bcast]") {
  CoordDaemon c;
  // Node 1 asks before the root has pushed anything: it waits.
  CHECK(c.fwd("node1", pull(1, 0, 0), 100).empty());
  // Chunk 0 goes out to the waiting node at once, and fits the window.
  auto r = c.fwd("node0", push(0), 1);
  REQUIRE(r.size() == 2);
  CHECK((r[0].to == "node1" && r[0].id == 100 && is_chunk(r[0], 0)));
  CHECK((r[1].to == "node0" && r[1].id == 1 && is_ok(r[1])));
  r = c.fwd("node0", push(1), 2);
  REQUIRE(r.size() == 1);
  CHECK(is_ok(r[0]));
  CHECK(is_chunk(c.fwd("node1", pull(1, 1, 1), 99).at(0), 1));
  // Chunk 2 is taken but not answered: node 2 has nothing yet.
  CHECK(c.fwd("node0", push(2), 3).empty());
  // Running further ahead than two windows is refused.
  r = c.fwd("node0", push(4), 4);
  REQUIRE(r.size() == 1);
  CHECK(r[0].code == ErrorCode::kTooLarge);
  // Node 1 gets chunk 2 (held, though its push is unanswered); node 2 starts.
  r = c.fwd("node1", pull(1, 2, 2), 101);
  REQUIRE(r.size() == 1);
  CHECK(is_chunk(r[0], 2));
  r = c.fwd("node2", pull(2, 0, 0), 200);
  REQUIRE(r.size() == 1);
  CHECK(is_chunk(r[0], 0));
  // Node 2 holding chunk 0 makes room: the root's push of chunk 2 is answered.
  r = c.fwd("node2", pull(2, 1, 1), 201);
  REQUIRE(r.size() == 2);
  CHECK((r[0].to == "node0" && r[0].id == 3 && is_ok(r[0])));
  CHECK(is_chunk(r[1], 1));
  // Chunk 0 is gone now: every node holds it.
  r = c.fwd("node2", pull(2, 0, 0), 202);
  REQUIRE(r.size() == 1);
  CHECK(r[0].code == ErrorCode::kConflict);
  CHECK(is_chunk(c.fwd("node2", pull(2, 2, 2), 199).at(0), 2));
  // The rest: node 2 waits for chunk 3 before it is pushed.
  CHECK(c.fwd("node2", pull(2, 2, 3), 203).empty());
  r = c.fwd("node0", push(3), 5);  // both nodes hold chunks 0..1: room for chunk 3
  REQUIRE(r.size() == 2);
  CHECK((r[0].to == "node2" && is_chunk(r[0], 3)));
  CHECK((r[1].to == "node0" && r[1].id == 5 && is_ok(r[1])));
  r = c.fwd("node1", pull(1, 3, 3), 102);
  REQUIRE(r.size() == 1);
  CHECK(is_chunk(r[0], 3));
  for (uint64_t k = 4; k < 6; ++k) {
    c.fwd("node0", push(k), 6 + k);
    CHECK(is_chunk(c.fwd("node1", pull(1, k, k), 110 + k).at(0), k));
    auto r2 = c.fwd("node2", pull(2, k, k), 210 + k);
    CHECK(is_chunk(r2.back(), k));
  }
  // The root cannot claim it is done early, or push after it is.
  CHECK(c.fwd("node0", leave(0), 20).at(0).code == ErrorCode::kOk);
  r = c.fwd("node0", push(5), 21);
  CHECK(r.at(0).code == ErrorCode::kConflict);
  CHECK(is_ok(c.fwd("node1", leave(1), 120).at(0)));
  CHECK(is_ok(c.fwd("node2", leave(2), 220).at(0)));
  // Over: every byte went to both pulling nodes, and the store says so.
  auto v = c.fwd("node1", StoreGet{"j", "muster/bcast/relayed", 0}, 300);
  REQUIRE(v.size() == 1);
  REQUIRE(v[0].type == static_cast<uint16_t>(MsgType::kValue));
  CHECK(v[0].value == std::to_string(2 * kSize));
  // Later requests for it are refused: it is over.
  r = c.fwd("node1", pull(1, 5, 5), 121);
  CHECK(r.at(0).code == ErrorCode::kConflict);
}

TEST_CASE("the relay checks who asks, and for what", "[bcast]") {
  CoordDaemon c;
  // The root's node does not pull; a node outside the world does not either.
  CHECK(c.fwd("node0", pull(0, 0, 0), 1).at(0).code == ErrorCode::kInvalidArgument);
  CHECK(c.fwd("node1", pull(7, 0, 0), 2).at(0).code == ErrorCode::kInvalidArgument);
  // Another size for the same broadcast is refused.
  BcastPull other = pull(1, 0, 0);
  other.size = kSize - 1;
  CHECK(c.fwd("node1", other, 3).at(0).code == ErrorCode::kInvalidArgument);
  // A root outside the world.
  BcastPush far = push(0);
  far.seq = 2;
  far.root = 6;
  CHECK(c.fwd("node0", far, 4).at(0).code == ErrorCode::kInvalidArgument);
  // A newer broadcast makes the older one stale.
  CHECK(c.fwd("node0", push(0, 3), 5).at(0).type == static_cast<uint16_t>(MsgType::kOk));
  CHECK(c.fwd("node0", push(1, 2), 6).at(0).code == ErrorCode::kConflict);
  // A Forward for another generation is refused by the coordinator.
  auto r = c.send("node0", Forward{"j", 1, encode(0, push(1, 3))}, 7);
  CHECK(r.at(0).code == ErrorCode::kStaleGeneration);
  // Not through the peer socket without a Forward.
  CHECK(c.send("node0", push(1, 3), 8).at(0).code == ErrorCode::kUnknownType);
}

TEST_CASE("a waiting push or pull fails when the root gives up, a rank exits or a node is lost",
          "[bcast]") {
  SECTION("the root gives up") {
    CoordDaemon c;
    CHECK(c.fwd("node1", pull(1, 0, 0), 100).empty());
    auto r = c.fwd("node0", leave(0, "its daemon said no"), 1);
    REQUIRE(r.size() == 2);
    CHECK((r[0].to == "node1" && r[0].code == ErrorCode::kPeerExited));
    CHECK(r[0].message.find("its daemon said no") != std::string::npos);
    CHECK(is_ok(r[1]));
    // And stays failed.
    CHECK(c.fwd("node2", pull(2, 0, 0), 200).at(0).code == ErrorCode::kPeerExited);
  }
  SECTION("a rank exits") {
    CoordDaemon c;
    CHECK(c.fwd("node1", pull(1, 0, 0), 100).empty());
    c.fwd("node0", push(0), 1);
    c.fwd("node0", push(1), 2);
    CHECK(c.fwd("node0", push(2), 3).empty());  // waits for room
    c.send("node2", RankExited{"j", 0, 4, "exited"});
    auto r = c.tick(0ms);
    REQUIRE(r.size() == 1);
    CHECK((r[0].to == "node0" && r[0].id == 3 && r[0].code == ErrorCode::kPeerExited));
    CHECK(r[0].message.find("rank 4") != std::string::npos);
  }
  SECTION("a node is lost") {
    CoordDaemon c;
    CHECK(c.fwd("node1", pull(1, 0, 0), 100).empty());
    auto r = c.tick(3000ms);  // no heartbeats for longer than the peer timeout
    REQUIRE(r.size() == 1);
    CHECK((r[0].to == "node1" && r[0].code == ErrorCode::kPeerExited));
    CHECK(r[0].message.find("lost") != std::string::npos);
  }
  SECTION("a pull times out") {
    CoordDaemon c;
    CHECK(c.fwd("node1", pull(1, 0, 0, 10), 100).empty());
    CHECK(c.tick(0ms).empty());
    auto r = c.tick(500ms);
    REQUIRE(r.size() == 1);
    CHECK(r[0].code == ErrorCode::kTimeout);
  }
  SECTION("a node that leaves no longer holds the root up") {
    CoordDaemon c;
    c.fwd("node0", push(0), 1);
    c.fwd("node0", push(1), 2);
    CHECK(c.fwd("node0", push(2), 3).empty());
    CHECK(is_ok(c.fwd("node1", leave(1, "size mismatch"), 100).at(0)));
    CHECK(c.fwd("node2", pull(2, 0, 1), 200).size() == 1);  // chunk 1
    auto r = c.fwd("node2", pull(2, 1, 2), 201);            // holds 0: room for chunk 2
    REQUIRE(r.size() == 2);
    CHECK((r[0].to == "node0" && r[0].id == 3 && is_ok(r[0])));
  }
}

TEST_CASE("shared pulls get the chunk's one frame, without a copy; others a frame of their own",
          "[bcast]") {
  CoordDaemon c;
  c.fwd("node0", push(0), 1);
  std::vector<Outgoing> out;
  auto send_out = [&](const std::string& node, BcastPull m, uint64_t id) {
    m.shared = true;
    auto frame = encode(id, Forward{"j", 0, encode(0, m)});
    auto env = decode_envelope(frame.data(), frame.size());
    ReplyTo to;
    to.routing_id = node, to.from_peer = true, to.request_id = id;
    c.s.handle(to, env, out);
  };
  send_out("node1", pull(1, 0, 0), 100);
  send_out("node2", pull(2, 0, 0), 200);
  REQUIRE(out.size() == 2);
  // The same bytes in memory for both nodes, under request id 0, naming
  // the broadcast and chunk (the node daemon finds its pull by them).
  CHECK(out[0].frame.empty());
  CHECK(out[0].body.data() == out[1].body.data());
  CHECK(out[0].held == out[1].held);
  auto r = CoordDaemon::replies(out);
  for (uint32_t k = 0; k < 2; ++k) {
    CHECK((r[k].to == "node" + std::to_string(k + 1) && r[k].id == 0 && is_chunk(r[k], 0)));
    CHECK((r[k].chunk.job == "j" && r[k].chunk.seq == 1 && r[k].chunk.root == 1));
  }
  // A coordinator takes bytes, never a rank's pool (its daemon's to open).
  BcastPull by_pool = pull(1, 0, 1);
  by_pool.pool = PoolRef{3, 1, 2, 0};
  CHECK(c.fwd("node1", by_pool, 101).at(0).code == ErrorCode::kInvalidArgument);
  BcastPush push_pool = push(1);
  push_pool.data.clear();
  push_pool.pool = PoolRef{3, 1, 2, 0};
  CHECK(c.fwd("node0", push_pool, 2).at(0).code == ErrorCode::kInvalidArgument);
}

TEST_CASE("each node gets a chunk once, under its own request id when not shared", "[bcast]") {
  CoordDaemon c;
  c.fwd("node0", push(0), 1);
  // Both nodes ask for chunk 0 while saying they hold nothing: it stays
  // held. Each gets a frame of its own, under its own request id, with the
  // root's bytes and checksum.
  auto r1 = c.fwd("node1", pull(1, 0, 0), 100);
  auto r2 = c.fwd("node2", pull(2, 0, 0), 200);
  REQUIRE(r1.size() == 1);
  REQUIRE(r2.size() == 1);
  CHECK((r1[0].to == "node1" && r1[0].id == 100 && is_chunk(r1[0], 0)));
  CHECK((r2[0].to == "node2" && r2[0].id == 200 && is_chunk(r2[0], 0)));
  // Asking again for a chunk every node was sent is refused, not answered
  // with an empty frame.
  auto again = c.fwd("node1", pull(1, 0, 0), 101);
  REQUIRE(again.size() == 1);
  CHECK(again[0].code == ErrorCode::kConflict);
  // A request id that packs in more bytes than the one before is put in
  // all the same.
  c.fwd("node0", push(1), 2);
  CHECK((is_chunk(c.fwd("node1", pull(1, 1, 1), uint64_t{1} << 40).at(0), 1)));
  auto big = c.fwd("node2", pull(2, 1, 1), UINT64_MAX - 1);
  REQUIRE(big.size() == 1);
  CHECK((big[0].id == UINT64_MAX - 1 && is_chunk(big[0], 1)));
}
