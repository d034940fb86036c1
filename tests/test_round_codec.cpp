// The coordinator's rounds in the state file (daemon/persist/round_codec):
// a round with its nodes, waiting nodes, node ranks of before, exited ranks
// and global store comes back from a snapshot as it was; the log's records
// replace a round's header without losing its keys; damaged bytes are
// refused with a reason; and a State saved by StateFile and loaded into a
// fresh one has the round back, its nodes counted as heard from now. A
// peer daemon's link keeps the replies to all its requests in flight (the
// reply cache's per-peer share), a local client only its last few.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <map>
#include <set>

#include "cluster/cluster.hpp"
#include "cluster/coordinator.hpp"
#include "cluster/multi_node.hpp"
#include "core/state.hpp"
#include "core/store.hpp"
#include "liveness/pidwatch.hpp"
#include "persist/cluster_codec.hpp"
#include "persist/reply_cache.hpp"
#include "persist/round_codec.hpp"
#include "persist/state_codec.hpp"
#include "persist/state_file.hpp"
#include "protocol/codec.hpp"
#include "protocol/envelope.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace muster::daemon;

namespace {

RoundNode node(const std::string& id, uint32_t rank) {
  RoundNode n;
  n.node_id = id;
  n.name = "host-" + id;
  n.to.routing_id = "L" + id;
  n.to.request_id = 40 + rank;
  n.nproc = 2;
  n.want_rank = rank == 0 ? 0 : -1;
  n.master_addr = "10.0.0.1";
  n.master_port = 29500;
  n.peer_endpoint = "10.0.0." + std::to_string(rank + 1) + ":29400";
  n.node_rank = rank;
  n.run = id + "/123/456";
  return n;
}

CoordJob sample() {
  CoordJob cj;
  cj.generation = 3;
  cj.closed = true;
  cj.min_nodes = 2;
  cj.max_nodes = 4;
  cj.owner_uid = 1000;
  cj.last_call_ms = 500;
  cj.nodes = {node("a", 0), node("b", 1)};
  cj.nodes[1].left = true;
  cj.waiting = {node("c", 0)};
  cj.previous = {{"a", 0}, {"b", 1}};
  cj.store.id = "job1";
  cj.store.generation = 3;
  cj.store.global_world_size = 4;
  cj.store.exited_ranks = {3};
  cj.store.kv.set("k1", "v1");
  cj.store.kv.set(std::string("bin\0key", 7), std::string("\xff\0", 2));
  cj.bcast_seq = 17;
  return cj;
}

msgpack::object_handle parse(const std::string& bytes) {
  return msgpack::unpack(bytes.data(), bytes.size());
}

std::string packed(const CoordJob& cj, bool with_store) {
  codec::Buffer buf;
  codec::Packer p(buf);
  round_codec::pack_round(p, "job1", cj, with_store);
  return std::string(buf.data(), buf.size());
}

void same(const CoordJob& a, const CoordJob& b, bool with_store) {
  CHECK(a.generation == b.generation);
  CHECK(a.closed == b.closed);
  CHECK(a.min_nodes == b.min_nodes);
  CHECK(a.max_nodes == b.max_nodes);
  CHECK(a.owner_uid == b.owner_uid);
  CHECK(a.last_call_ms == b.last_call_ms);
  // An open round's nodes had no answer yet: they send their joins again.
  const size_t saved = a.closed ? a.nodes.size() : 0;
  REQUIRE(b.nodes.size() == saved);
  for (size_t i = 0; i < saved; ++i) {
    CHECK(a.nodes[i].node_id == b.nodes[i].node_id);
    CHECK(a.nodes[i].to.routing_id == b.nodes[i].to.routing_id);
    CHECK(a.nodes[i].to.request_id == b.nodes[i].to.request_id);
    CHECK(a.nodes[i].peer_endpoint == b.nodes[i].peer_endpoint);
    CHECK(a.nodes[i].node_rank == b.nodes[i].node_rank);
    CHECK(a.nodes[i].left == b.nodes[i].left);
    CHECK(a.nodes[i].run == b.nodes[i].run);
  }
  CHECK(b.waiting.empty());  // never saved, for the same reason
  CHECK(a.previous == b.previous);
  CHECK(a.store.global_world_size == b.store.global_world_size);
  CHECK(a.store.exited_ranks == b.store.exited_ranks);
  CHECK(a.bcast_seq == b.bcast_seq);
  if (with_store) {
    CHECK(b.store.kv.size() == 2);
    CHECK(*b.store.kv.find("k1") == "v1");
    CHECK(*b.store.kv.find(std::string("bin\0key", 7)) == std::string("\xff\0", 2));
  }
}

// A state directory whose state file f, loaded empty, then saved a closed
// round of 2,000 nodes (a record of some 360 KB).
// Node `node` (uid 1000's, 2 ranks) joins c's job1 of exactly `nodes`
// nodes, as request `id` over its link "L<node>".
void rejoin(Coordinator& c, const std::string& node, uint32_t nodes, uint64_t id,
            std::vector<Outgoing>& out) {
  proto::NodeJoin m;
  m.job = "job1";
  m.node_id = node;
  m.nproc = 2;
  m.min_nodes = m.max_nodes = nodes;
  m.owner_uid = 1000;
  ReplyTo to;
  to.routing_id = "L" + node;
  to.request_id = id;
  to.from_peer = true;
  c.node_join(to, m, {}, out);
}

struct SavedBigRound {
  test::TempDir dir;
  PidWatch watch;
  ReplyCache replies;
  State st{{}, watch};
  StateFile f{dir.path()};
  CoordJob big = sample();

  SavedBigRound() {
    f.load(st, replies);
    big.nodes.clear();
    for (uint32_t i = 0; i < 2000; ++i) big.nodes.push_back(node("node-" + std::to_string(i), i));
    st.cluster().restore_round("job1", big);
    REQUIRE(f.save(st, replies));
  }
};

}  // namespace

TEST_CASE("a round comes back from its bytes as it was") {
  const CoordJob cj = sample();
  auto h = parse(packed(cj, true));
  auto [job, back] = round_codec::decode_round(h.get(), "test");
  CHECK(job == "job1");
  same(cj, back, true);
  CHECK(back.store.global);
  CHECK(back.nodes[0].to.from_peer);
}

TEST_CASE("log records replace a round's header and keep its keys; gone is gone") {
  std::map<std::string, CoordJob> rounds;
  namespace sc = state_codec;
  auto apply = [&](uint8_t type, const std::string& payload) {
    auto h = parse(payload);
    round_codec::apply(rounds, type, h.get());
  };
  CoordJob cj = sample();
  apply(sc::kRound, round_codec::round_record("job1", cj));
  apply(sc::kRoundKey, sc::key_set("job1", "k1", "v1"));
  apply(sc::kRoundKey, sc::key_set("job1", "k2", "v2"));
  cj.generation = 4;
  apply(sc::kRound, round_codec::round_record("job1", cj));
  apply(sc::kRoundKeyGone, sc::key_gone("job1", "k2"));
  REQUIRE(rounds.count("job1"));
  CHECK(rounds["job1"].generation == 4);
  CHECK(rounds["job1"].store.kv.size() == 1);
  CHECK(*rounds["job1"].store.kv.find("k1") == "v1");
  // A key of a round the log never named is a damaged log.
  CHECK_THROWS_AS(apply(sc::kRoundKey, sc::key_set("other", "k", "v")), Error);
  apply(sc::kRoundGone, sc::job_gone("job1"));
  CHECK(rounds.empty());
}

TEST_CASE("a damaged round is refused with a reason, not half restored") {
  CoordJob cj = sample();
  cj.store.exited_ranks = {9};  // outside its world of 4
  auto h = parse(packed(cj, false));
  try {
    round_codec::decode_round(h.get(), "test");
    FAIL("decoded a round with an exited rank outside its world");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kBadMessage);
    CHECK(std::string(e.what()).find("exited") != std::string::npos);
  }
  // A field of the wrong type, and a node without an id.
  CoordJob bad = sample();
  bad.nodes[0].node_id.clear();
  auto h2 = parse(packed(bad, false));
  CHECK_THROWS_AS(round_codec::decode_round(h2.get(), "test"), Error);
  auto h3 = parse("\x81\xa3job\x05");  // {"job": 5}
  CHECK_THROWS_AS(round_codec::decode_round(h3.get(), "test"), Error);
}

TEST_CASE("a State's coordinated round is saved and loaded by the state file") {
  test::TempDir dir;
  PidWatch watch;
  ReplyCache replies;
  {
    State st({}, watch);
    st.cluster().restore_round("job1", sample());
    StateFile f(dir.path());
    f.load(st, replies);  // empty dir: starts a log
    st.cluster().restore_round("job1", sample());
    REQUIRE(f.save(st, replies));
  }
  State back({}, watch);
  StateFile f(dir.path());
  f.load(back, replies);
  REQUIRE(back.cluster().rounds().count("job1"));
  const CoordJob& cj = back.cluster().rounds().at("job1");
  same(sample(), cj, true);
  // Heard from now: a node the restarted daemon could not hear from is not
  // lost for the time it was down.
  for (const auto& n : cj.nodes) CHECK(Clock::now() - n.last_seen < std::chrono::seconds(5));
  CHECK(cj.restored_bcast_seq == 17);  // its broadcasts up to #17 start again
}

TEST_CASE("a peer daemon's link keeps the replies to all its requests in flight") {
  ReplyCache cache;
  auto answer = [&](const std::string& client, int64_t uid, uint64_t id) {
    ReplyTo to;
    to.routing_id = client;
    to.peer_uid = uid;
    to.request_id = id;
    cache.begin(to, 8 /* store_add: saved */, 1000 + id);
    std::vector<Outgoing> out{{to, "reply-" + std::to_string(id)}};
    cache.complete(out);
  };
  for (uint64_t id = 1; id <= 200; ++id) answer("Lpeer", -1, id);
  for (uint64_t id = 1; id <= 200; ++id) answer("local", 1000, id);
  auto seen = [&](const std::string& client, int64_t uid, uint64_t id) {
    ReplyTo to;
    to.routing_id = client;
    to.peer_uid = uid;
    to.request_id = id;
    std::string reply;
    return cache.check(to, 1000 + id, &reply) == ReplyCache::Seen::kAnswered &&
           reply == "reply-" + std::to_string(id);
  };
  CHECK(seen("Lpeer", -1, 1));  // all 200 of the peer's
  CHECK(seen("Lpeer", -1, 200));
  CHECK_FALSE(seen("local", 1000, 1));  // a local client's last 4 only
  CHECK(seen("local", 1000, 200));
}

TEST_CASE("a restored round no node comes back to keeps nothing alive and is dropped") {
  PidWatch watch;
  State st({}, watch);
  st.cluster().restore_round("job1", sample());
  // Not work an embedded daemon waits for: its nodes may be long gone.
  CHECK(st.job_count() == 0);
  std::vector<Outgoing> out;
  st.cluster().tick(Clock::now() + std::chrono::seconds(5), out);
  CHECK(st.cluster().rounds().count("job1") == 1);  // within the peer timeout (10 s)
  st.cluster().tick(Clock::now() + std::chrono::seconds(11), out);
  CHECK(st.cluster().rounds().empty());
  CHECK(st.cluster().take_save_wanted());  // its removal reaches the disk
}

TEST_CASE("a restored open round closes only once its nodes joined again") {
  Store store;
  Coordinator c(store);
  CoordJob cj = sample();
  cj.closed = false;
  cj.min_nodes = cj.max_nodes = 3;
  cj.waiting.clear();
  cj.nodes[1].left = false;
  c.restore("job1", cj);
  std::vector<Outgoing> out;
  auto join = [&](const std::string& node, uint64_t id) { rejoin(c, node, 3, id, out); };
  // A third node joins before the two restored ones are back: their World
  // would go where the dead daemon's connections were, so the round waits.
  join("c", 1);
  CHECK_FALSE(c.rounds().at("job1").closed);
  join("a", 7);
  CHECK_FALSE(c.rounds().at("job1").closed);
  join("b", 8);  // both sent their joins again: it closes, a World each
  REQUIRE(c.rounds().at("job1").closed);
  std::set<std::string> to;
  for (const auto& o : out) to.insert(o.to.routing_id + "/" + std::to_string(o.to.request_id));
  CHECK(to == std::set<std::string>{"La/7", "Lb/8", "Lc/1"});
}

TEST_CASE(
    "joins to an open round add nothing to its record; a closed one's follows its fingerprint") {
  CoordJob open = sample();
  open.closed = false;
  const std::string before = round_codec::round_record("job1", open);
  for (uint32_t i = 0; i < 100; ++i) open.nodes.push_back(node("n" + std::to_string(i), i));
  CHECK(round_codec::round_record("job1", open) == before);  // a join's save stays O(1)
  CHECK(round_codec::fingerprint(open).empty());             // encoded every time instead

  CoordJob cj = sample();
  const std::string fp = round_codec::fingerprint(cj);
  REQUIRE_FALSE(fp.empty());
  auto changes = [&](auto&& change) {
    CoordJob c = sample();
    change(c);
    CHECK(round_codec::round_record("job1", c) != round_codec::round_record("job1", sample()));
    return round_codec::fingerprint(c) != fp;
  };
  CHECK(changes([](CoordJob& c) { c.nodes[0].left = true; }));
  CHECK(changes([](CoordJob& c) { c.store.exited_ranks.insert(0); }));
  CHECK(changes([](CoordJob& c) { c.broken = "node b was lost"; }));
  CHECK(changes([](CoordJob& c) { c.bcast_seq += 1; }));
  CHECK(changes([](CoordJob& c) { c.generation += 1; }));
  CHECK(changes([](CoordJob& c) { c.previous["c"] = 2; }));
  // What changes no saved field leaves both alone.
  CoordJob c = sample();
  c.nodes[0].last_seen = Clock::now() + std::chrono::seconds(9);
  c.waiting.push_back(node("d", 3));
  CHECK(round_codec::fingerprint(c) == fp);
  CHECK(round_codec::round_record("job1", c) == round_codec::round_record("job1", sample()));
}

TEST_CASE("a batch of peer requests reserves room for a large round once, not per request") {
  SavedBigRound r;
  const size_t header = round_codec::round_record("job1", r.big).size();
  REQUIRE(header > 200 * 1024);
  // 2,000 requests of one batch (a swarm's joins): claimed per request,
  // the round's header alone would reserve 2,000 x its size on the disk.
  std::string why;
  for (int i = 0; i < 2000; ++i) REQUIRE(r.f.reserve(100, false, true, &why));
  struct stat s {};
  REQUIRE(::stat((r.dir.path() + "/state.log").c_str(), &s) == 0);
  const uint64_t reserved = static_cast<uint64_t>(s.st_blocks) * 512;
  INFO("state.log holds " << reserved << " bytes on disk; the round's header is " << header);
  const uint64_t kBound = 64 << 20;  // per request it would be 2,000 x 360 KB, 700 MB
  CHECK(reserved < kBound);
  // After the save the room for the rounds is claimed again, once.
  REQUIRE(r.f.save(r.st, r.replies));
  for (int i = 0; i < 2000; ++i) REQUIRE(r.f.reserve(100, false, true, &why));
  REQUIRE(::stat((r.dir.path() + "/state.log").c_str(), &s) == 0);
  CHECK(static_cast<uint64_t>(s.st_blocks) * 512 < kBound);
}

TEST_CASE("a closed round that did not change is not written again") {
  SavedBigRound r;
  auto log_bytes = [&] {
    struct stat s {};
    REQUIRE(::stat((r.dir.path() + "/state.log").c_str(), &s) == 0);
    return s.st_size;
  };
  const auto after_first = log_bytes();
  REQUIRE(r.f.save(r.st, r.replies));
  REQUIRE(r.f.save(r.st, r.replies));
  CHECK(log_bytes() == after_first);
}

TEST_CASE("an open round, saved without its nodes, comes back whole and waits for them") {
  test::TempDir dir;
  PidWatch watch;
  ReplyCache replies;
  CoordJob open = sample();
  open.closed = false;  // re-forming after a node restarted
  open.generation = 4;
  open.min_nodes = open.max_nodes = 2;
  open.store.exited_ranks.clear();
  {
    State st({}, watch);
    StateFile f(dir.path());
    f.load(st, replies);
    st.cluster().restore_round("job1", open);
    REQUIRE(f.save(st, replies));
  }
  State back({}, watch);
  StateFile f(dir.path());
  f.load(back, replies);
  std::vector<Outgoing> out;
  back.cluster().tick(Clock::now() + std::chrono::milliseconds(100), out);
  // Not ended as a round with no nodes left: its generation, node ranks of
  // before and global store were all acknowledged.
  REQUIRE(back.cluster().rounds().count("job1"));
  const CoordJob& cj = back.cluster().rounds().at("job1");
  CHECK(cj.nodes.empty());
  CHECK(cj.generation == 4);
  CHECK(cj.previous == open.previous);
  REQUIRE(cj.store.kv.find("k1"));
  CHECK(*cj.store.kv.find("k1") == "v1");
  // Its nodes send their joins again: the world forms at that generation,
  // each node at its rank of before.
  Store store;
  Coordinator c(store);
  c.restore("job1", cj);
  for (const char* id : {"b", "a"}) rejoin(c, id, 2, 9, out);
  REQUIRE(c.rounds().at("job1").closed);
  std::map<std::string, proto::World> worlds;
  for (const auto& o : out) {
    auto env = proto::decode_envelope(o.frame.data(), o.frame.size());
    if (env.type == static_cast<uint16_t>(proto::MsgType::kWorld))
      worlds[o.to.routing_id] = proto::World::unpack(env.payload);
  }
  REQUIRE(worlds.size() == 2);
  CHECK(worlds["La"].generation == 4);
  CHECK(worlds["La"].node_rank == 0);
  CHECK(worlds["Lb"].node_rank == 1);
}

// A node's part of a multi-node job keeps where its broadcasts go (the
// chain, World::chain_prev) across a restart; a state file from before
// chains reads as "through the coordinator".
TEST_CASE("a node's cluster part round-trips with its chain; an older one has none") {
  ClusterInfo c;
  c.coordinator = "10.0.0.1:29400";
  c.formed = true;
  c.node_rank = 2, c.num_nodes = 4, c.rank_offset = 4, c.world_size = 8;
  c.parent = "10.0.0.2:29400";
  c.subtree_ranks = 2;
  c.chain_prev = "10.0.0.3:29400";
  c.chain_next_nproc = 3;
  c.phase = ClusterPhase::kRunning;
  codec::Buffer buf;
  codec::Packer p(buf);
  cluster_codec::pack_cluster(p, c);
  auto h = msgpack::unpack(buf.data(), buf.size());
  ClusterInfo back = cluster_codec::decode_cluster(h.get(), "j");
  CHECK(back.chain_prev == c.chain_prev);
  CHECK(back.chain_next_nproc == 3);
  CHECK(back.parent == c.parent);
  CHECK(back.rank_offset == 4);
  CHECK(back.phase == ClusterPhase::kRunning);
  // The map as daemons wrote it before chains: 9 keys.
  codec::Buffer old;
  codec::Packer o(old);
  o.pack_map(9);
  for (auto [k, v] :
       {std::pair{"coordinator", "10.0.0.1:29400"}, {"parent", ""}, {"state", "running"}})
    codec::key(o, k), codec::put_str(o, v);
  codec::key(o, "formed"), o.pack(true);
  for (auto k : {"node_rank", "rank_offset", "subtree_ranks"}) codec::key(o, k), o.pack(0);
  for (auto k : {"num_nodes", "world_size"}) codec::key(o, k), o.pack(2);
  auto oh = msgpack::unpack(old.data(), old.size());
  ClusterInfo before = cluster_codec::decode_cluster(oh.get(), "j");
  CHECK(before.chain_prev.empty());
  CHECK(before.chain_next_nproc == 0);
  CHECK(before.num_nodes == 2);
}
