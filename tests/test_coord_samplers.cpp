// The coordinator's keeping of resumable samplers' progress (issue #24,
// daemon/cluster/coord_samplers.cpp), driven through daemon::State with no
// sockets: nodes join a world of a job that spans nodes, and Forwards carry
// sampler_commit and sampler_resume as the node daemons would.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>

#include "cluster/multi_node.hpp"
#include "core/state.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/messages.hpp"
#include "protocol/sampler_messages.hpp"
#include "support/replies.hpp"

using namespace muster;
using namespace muster::daemon;
using namespace muster::proto;
using namespace std::chrono_literals;

namespace {

constexpr int64_t kRoot = 0;

struct Answer : test::ReplyHead {
  proto::SamplerPlace place;
};

// A coordinator daemon: nodes of 2 ranks join jobs elastic from 1 to 2
// nodes, each node's NodeJoin answered once the round closes.
struct CoordDaemon {
  PidWatch watch;
  State s{{}, watch};
  uint64_t next = 1;

  CoordDaemon() { s.cluster().configure("coord", 2000ms, "", 16); }

  std::vector<Answer> send(const std::string& node, const std::string& frame) {
    ReplyTo from;
    from.routing_id = node;
    from.from_peer = true;
    return answers(test::handle_frame(s, from, frame));
  }
  // run: NodeJoin::run, the muster run of the node's part ("" = none).
  std::vector<Answer> join(const std::string& job, const std::string& node, int64_t owner = kRoot,
                           const std::string& run = "") {
    return send(node, encode(next++, NodeJoin{job, node, 2, -1, 1, 2, 0, 60000, "127.0.0.1", 1, "",
                                              owner, "", run}));
  }
  // Both nodes join: the round closes at once (max_nodes), world 4.
  void form(const std::string& job, const std::string& run_a = "", const std::string& run_b = "") {
    CHECK(join(job, "node-a", kRoot, run_a).empty());
    auto worlds = join(job, "node-b", kRoot, run_b);
    REQUIRE(worlds.size() == 2);
    for (auto& w : worlds) REQUIRE(w.type == static_cast<uint16_t>(MsgType::kWorld));
  }
  std::vector<Answer> leave(const std::string& job, const std::string& node, uint64_t gen) {
    return send(node, encode(next++, NodeLeave{job, gen, node}));
  }
  std::vector<Answer> tick(std::chrono::milliseconds later) {
    std::vector<Outgoing> out;
    s.cluster().tick(Clock::now() + later, out);
    return answers(out);
  }
  // What a node daemon sends for its rank: the request inside a Forward
  // checked for `job` at generation `gen`.
  template <class M>
  Answer fwd(const std::string& node, const std::string& job, uint64_t gen, const M& m) {
    auto r = send(node, encode(next++, Forward{job, gen, encode(0, m)}));
    REQUIRE(r.size() == 1);
    return r[0];
  }
  Answer commit(const std::string& node, uint32_t rank, uint64_t consumed, uint64_t gen = 0,
                const std::string& job = "j", uint64_t seed = 7) {
    return fwd(node, job, gen, SamplerCommit{job, rank, 1000, seed, true, false, 2, consumed});
  }
  Answer resume(const std::string& node, uint64_t gen = 0, const std::string& job = "j") {
    return fwd(node, job, gen, SamplerResume{job, 1000, 7, true});
  }

  static std::vector<Answer> answers(const std::vector<Outgoing>& out) {
    std::vector<Answer> r;
    for (const auto& o : out) {
      if (!o.link.empty()) continue;  // the coordinator's own heartbeats, if any
      auto env = decode_envelope(o.frame.data(), o.frame.size());
      Answer a;
      static_cast<test::ReplyHead&>(a) = test::reply_head(o, env);
      if (env.type == static_cast<uint16_t>(MsgType::kSamplerPlace))
        a.place = proto::SamplerPlace::unpack(env.payload);
      r.push_back(std::move(a));
    }
    return r;
  }
};

}  // namespace

TEST_CASE("a commit forwarded from one node is what another node resumes", "[sampler][cluster]") {
  CoordDaemon c;
  c.form("j");
  CHECK_FALSE(c.resume("node-b").place.found);
  CHECK(c.commit("node-a", 0, 40).type == static_cast<uint16_t>(MsgType::kOk));
  auto a = c.resume("node-b");
  REQUIRE(a.type == static_cast<uint16_t>(MsgType::kSamplerPlace));
  CHECK(a.place.found);
  CHECK(a.place.epoch == 2);
  CHECK(a.place.consumed == 40);
  // The last commit wins, whichever node sent it.
  CHECK(c.commit("node-b", 3, 60).code == ErrorCode::kOk);
  CHECK(c.resume("node-a").place.consumed == 60);
}

TEST_CASE("a commit for a rank outside the world is refused and changes nothing",
          "[sampler][cluster]") {
  CoordDaemon c;
  c.form("j");
  REQUIRE(c.commit("node-a", 1, 20).code == ErrorCode::kOk);
  auto bad = c.commit("node-b", 4, 80);  // world 4: ranks 0..3
  CHECK(bad.code == ErrorCode::kInvalidArgument);
  CHECK(bad.message.find("world size 4") != std::string::npos);
  CHECK(c.resume("node-a").place.consumed == 20);
  // A request of another generation is refused before it reaches the record.
  CHECK(c.commit("node-a", 0, 80, 1).code == ErrorCode::kStaleGeneration);
  CHECK(c.resume("node-a").place.consumed == 20);
}

TEST_CASE("a node forwarding for one job can neither commit nor read another job's progress",
          "[sampler][cluster]") {
  CoordDaemon c;
  c.form("j");
  c.form("other");
  REQUIRE(c.commit("node-a", 0, 30, 0, "other").code == ErrorCode::kOk);
  // A Forward checked for "j" whose inner request names "other".
  auto wrote = c.fwd("node-a", "j", 0, SamplerCommit{"other", 0, 1000, 7, true, false, 2, 90});
  CHECK(wrote.code == ErrorCode::kPermissionDenied);
  auto read = c.fwd("node-a", "j", 0, SamplerResume{"other", 1000, 7, true});
  CHECK(read.code == ErrorCode::kPermissionDenied);
  CHECK(c.resume("node-a", 0, "other").place.consumed == 30);
  CHECK_FALSE(c.resume("node-a").place.found);
  // A Forward for a job not coordinated here reaches nothing.
  CHECK(c.commit("node-a", 0, 30, 0, "nowhere").code == ErrorCode::kUnknownJob);
}

TEST_CASE("progress outlives a lost node and the elastic re-form without it",
          "[sampler][cluster]") {
  CoordDaemon c;
  c.form("j");
  REQUIRE(c.commit("node-a", 0, 40).code == ErrorCode::kOk);
  c.tick(3s);  // both silent past the peer timeout: the generation is broken
  CHECK(c.resume("node-b").code == ErrorCode::kPeerExited);
  // node-b restarts alone; the round closes at its last call with 1 node.
  CHECK(c.join("j", "node-b").empty());
  auto world = c.tick(0ms);
  REQUIRE(world.size() == 1);
  REQUIRE(world[0].type == static_cast<uint16_t>(MsgType::kWorld));
  auto a = c.resume("node-b", 1);
  CHECK(a.place.found);
  CHECK(a.place.consumed == 40);
  // The rank check follows the world: 2 ranks now.
  CHECK(c.commit("node-b", 2, 50, 1).code == ErrorCode::kInvalidArgument);
  CHECK(c.commit("node-b", 1, 50, 1).code == ErrorCode::kOk);
  CHECK(c.resume("node-b", 1).place.consumed == 50);
}

TEST_CASE("progress lingers after every node left, for the run's next round only",
          "[sampler][cluster]") {
  CoordDaemon c;
  c.form("j");
  REQUIRE(c.commit("node-a", 0, 40).code == ErrorCode::kOk);
  // A restart whose nodes all stopped before one joined again: the round
  // ends, and the next one of the same owner takes the progress over.
  c.leave("j", "node-a", 0);
  c.leave("j", "node-b", 0);
  c.form("j");
  CHECK(c.resume("node-a").place.consumed == 40);
  // Past the linger the run is over: a later round starts afresh.
  c.leave("j", "node-a", 0);
  c.leave("j", "node-b", 0);
  c.tick(61s);
  c.form("j");
  CHECK_FALSE(c.resume("node-a").place.found);
  // Another user's job of the same name gets nothing of a lingering record.
  REQUIRE(c.commit("node-a", 0, 40).code == ErrorCode::kOk);
  c.leave("j", "node-a", 0);
  c.leave("j", "node-b", 0);
  CHECK(c.join("j", "node-a", 1001).empty());
  auto worlds = c.join("j", "node-b", 1001);
  REQUIRE(worlds.size() == 2);
  CHECK_FALSE(c.resume("node-a").place.found);
}

TEST_CASE("a job commits at most kMaxSamplersPerJob samplers at its coordinator",
          "[sampler][cluster]") {
  CoordDaemon c;
  c.form("j");
  for (uint64_t seed = 0; seed < SamplerProgress::kMaxSamplersPerJob; ++seed)
    REQUIRE(c.commit("node-a", 0, 1, 0, "j", seed).code == ErrorCode::kOk);
  CHECK(c.commit("node-a", 0, 1, 0, "j", 1000).code == ErrorCode::kTooLarge);
  CHECK(c.commit("node-a", 0, 2, 0, "j", 3).code == ErrorCode::kOk);  // a known one still
}

TEST_CASE("lingering progress goes on with a round of the same muster run, not a new launch",
          "[sampler][cluster]") {
  CoordDaemon c;
  c.form("j", "a/100/1", "b/200/1");
  REQUIRE(c.commit("node-a", 0, 40).code == ErrorCode::kOk);
  // Every node's group stopped; node-b's launcher (the same run) restarts
  // its part first, then node-a's: the run goes on from its commit.
  c.leave("j", "node-a", 0);
  c.leave("j", "node-b", 0);
  CHECK(c.join("j", "node-b", kRoot, "b/200/1").empty());
  REQUIRE(c.join("j", "node-a", kRoot, "a/100/1").size() == 2);
  CHECK(c.resume("node-a").place.consumed == 40);
  // A new launch within the linger (new launchers on both nodes, the same
  // job id and owner) starts afresh.
  REQUIRE(c.commit("node-a", 0, 60).code == ErrorCode::kOk);
  c.leave("j", "node-a", 0);
  c.leave("j", "node-b", 0);
  c.form("j", "a/300/9", "b/400/9");
  CHECK_FALSE(c.resume("node-a").place.found);
  // One node of the old run in the new round is enough (the other was
  // replaced: an elastic re-form after a lost node).
  REQUIRE(c.commit("node-b", 1, 80).code == ErrorCode::kOk);
  c.leave("j", "node-a", 0);
  c.leave("j", "node-b", 0);
  c.form("j", "c/500/3", "b/400/9");
  CHECK(c.resume("node-a").place.consumed == 80);
}

TEST_CASE("a node daemon's NodeJoin names the muster run of its part of the job",
          "[sampler][cluster]") {
  PidWatch watch;
  State node{{}, watch};
  node.cluster().configure("node-x", 2000ms, "", 16);
  auto ask = [&](const std::string& frame) {
    auto env = decode_envelope(frame.data(), frame.size());
    ReplyTo to;
    to.routing_id = "launcher";
    to.request_id = env.request_id;
    to.peer_uid = 0;
    std::vector<Outgoing> out;
    node.handle(to, env, out);
    return out;
  };
  // This process stands for the launcher (muster run) of the job.
  auto reserved = ask(encode(1, Reserve{"j", 1, false, {}, ::getpid()}));
  REQUIRE(reserved.size() == 1);
  REQUIRE(decode_envelope(reserved[0].frame.data(), reserved[0].frame.size()).type ==
          static_cast<uint16_t>(MsgType::kReserved));
  auto out = ask(encode(2, Rendezvous{"j", "127.0.0.1:1", -1, 1, 2, 0, 10000, "127.0.0.1", 1}));
  REQUIRE(out.size() == 1);
  REQUIRE(out[0].link == "127.0.0.1:1");
  auto env = decode_envelope(out[0].frame.data(), out[0].frame.size());
  REQUIRE(env.type == static_cast<uint16_t>(MsgType::kNodeJoin));
  auto run = NodeJoin::unpack(env.payload).run;
  CHECK(run == "node-x/" + std::to_string(::getpid()) + "/" +
                   std::to_string(PidWatch::start_time(::getpid())));
  CHECK(PidWatch::start_time(::getpid()) > 0);
}
