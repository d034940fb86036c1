// Joins through relays (daemon/cluster/joins.cpp, coord_joins.cpp): a node
// started with `muster run --join-via HOST:PORT` sends its join to that
// daemon, which passes its children's joins to the coordinator as one
// node_joins; the coordinator answers the Worlds of one relay in one
// `replies`. A relay that cannot pass a join on, or one that never
// answers, costs the node its batch, not its job: it joins the
// coordinator itself. A batch from a peer is checked join by join: what is
// not a join of the batch's job is refused under its own request id and
// changes nothing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "muster/client.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/errors.hpp"
#include "protocol/messages.hpp"
#include "support/as_user.hpp"
#include "support/cluster.hpp"
#include "support/node_join.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace muster::test;
using namespace std::chrono_literals;

namespace {

// A coordinator (daemon 0, node 0 of the job, logging at debug level) and
// n more daemons that listen for peers.
struct Nodes {
  TempDir logs;
  Cluster c{0};
  std::string log0 = logs.path() + "/coordinator.log";
  explicit Nodes(int n) {
    c.nproc = "1";
    add_listening(c, n, "4", log0);
  }
  std::string log() const {
    std::ifstream in(log0);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // The joins the coordinator took in batches (its node_joins lines).
  int batched() const {
    int n = 0;
    std::istringstream in(log());
    for (std::string line; std::getline(in, line);)
      if (auto at = line.find("node_joins: "); at != std::string::npos)
        n += std::stoi(line.substr(at + 12));
    return n;
  }
  std::string peer(int i) const {
    std::string e = c.daemons[i]->peer_endpoint();  // tcp://host:port
    return e.substr(e.find("://") + 3);
  }
  // Every node runs one rank; via[i] (if any) is node i's --join-via.
  void run_all(const std::string& job, const std::map<int, std::string>& via) {
    std::vector<std::unique_ptr<Process>> runs;
    const int n = static_cast<int>(c.daemons.size());
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> extra = {"--node-rank", std::to_string(i)};
      if (auto v = via.find(i); v != via.end())
        extra.insert(extra.end(), {"--join-via", v->second});
      runs.push_back(c.run(i, job, std::to_string(n), extra));
    }
    for (int i = 0; i < n; ++i) {
      auto text = runs[i]->read_all(60s);
      INFO("node " << i << ":\n" << text);
      REQUIRE(runs[i]->wait(10s) == 0);
      CHECK(text.find("store=ok") != std::string::npos);
      CHECK(text.find("nodes=" + std::to_string(n)) != std::string::npos);
      // The world of the first round: no node joined twice (a restart).
      CHECK(text.find("generation=0") != std::string::npos);
      CHECK(text.find("generation=1") == std::string::npos);
    }
  }
};

}  // namespace

TEST_CASE("nodes that join through a relay form the world with one batch at the coordinator",
          "[cluster]") {
  Nodes t(5);
  // Nodes 2, 3 and 4 join through node 1's daemon.
  t.run_all("via", {{2, t.peer(1)}, {3, t.peer(1)}, {4, t.peer(1)}});
  INFO(t.log());
  // All three of them reached the coordinator inside node_joins, and no
  // other join did (nodes 0 and 1 joined it themselves).
  CHECK(t.batched() == 3);
}

TEST_CASE("a relay that has no part of the job refuses to hold joins; the node joins directly",
          "[cluster]") {
  Nodes t(3);
  // Daemon 3 listens but runs nothing of the job: it holds node 2's join
  // for 2 s, then refuses it (unavailable); node 2 joins the coordinator
  // itself at once (its own fallback for a silent relay waits 3 s).
  TestDaemon idle({"--peer-plain", "--peer-bind", "127.0.0.1", "--peer-port", "0"});
  const std::string e = idle.peer_endpoint();
  t.run_all("refused", {{2, e.substr(e.find("://") + 3)}});
  CHECK(t.batched() == 0);
}

TEST_CASE("a node whose relay never answers joins the coordinator itself", "[cluster]") {
  Nodes t(3);
  // Nothing listens there: the join waits; the coordinator's answer to the
  // node's heartbeat says it has not heard of it, so it goes directly.
  const std::string nowhere = "127.0.0.1:" + std::to_string(free_port());
  t.run_all("silent", {{2, nowhere}});
  CHECK(t.batched() == 0);
}

TEST_CASE("a batch of joins is checked join by join and answers each under its own id",
          "[cluster][hostile]") {
  Nodes t(1);
  RawClient relay("tcp://" + t.c.coordinator(), "a-relay");
  proto::NodeJoins batch{"batch", {}};
  batch.joins.push_back({proto::encode(11, proto::Ping{})});                      // not a join
  batch.joins.push_back({proto::encode(12, test::node_join("another", "n-2"))});  // another job
  auto relayed = test::node_join("batch", "n-3");
  relayed.relay = true;
  batch.joins.push_back({proto::encode(13, relayed)});      // meant for a relay
  batch.joins.push_back({std::string("\x94\x01\x0e", 3)});  // garbage
  relay.send(proto::encode(1, batch));
  std::map<uint64_t, std::string> got;
  for (int i = 0; i < 5; ++i) {
    auto f = relay.recv_frame(10s);
    REQUIRE(f);
    got[proto::decode_envelope(f->data(), f->size()).request_id] = describe(*f);
  }
  INFO(got.size());
  CHECK(got[1] == "reply=ok");
  CHECK(got[11].rfind("error=unknown_type", 0) == 0);
  CHECK(got[12].rfind("error=permission_denied", 0) == 0);
  CHECK(got[13].rfind("error=invalid_argument", 0) == 0);
  CHECK(got.size() == 5);  // the garbage frame's answer, under whatever id it had
  // None of them started a round: the coordinator knows no such jobs.
  auto st = Client({t.c.daemons[0]->endpoint()}).status();
  for (const auto& j : st.jobs) CHECK((j.id != "batch" && j.id != "another"));
  RawClient beat("tcp://" + t.c.coordinator(), "n-2");
  std::string ack =
      beat.ask(proto::encode(2, proto::Heartbeat{"n-2", {{"another", 0}, {"batch", 0}}}), 10s);
  INFO(ack);
  CHECK(ack.find("state=unknown") != std::string::npos);
  CHECK(ack.find("state=forming") == std::string::npos);

  // Two good joins in one batch: the round closes and both Worlds come back
  // in one `replies`, each under its join's id.
  proto::NodeJoins good{"batch", {}};
  auto a = test::node_join("batch", "n-a");
  a.node_rank = 0;
  auto b = test::node_join("batch", "n-b");
  b.node_rank = 1;
  good.joins.push_back({proto::encode(21, a)});
  good.joins.push_back({proto::encode(22, b)});
  relay.send(proto::encode(3, good));
  std::vector<std::string> frames;
  for (int i = 0; i < 2; ++i) {
    auto f = relay.recv_frame(10s);
    REQUIRE(f);
    frames.push_back(*f);
  }
  // The round closed inside the batch: its Worlds went before the batch's Ok.
  if (describe(frames[1]) != "reply=ok") std::swap(frames[0], frames[1]);
  CHECK(describe(frames[1]) == "reply=ok");
  CHECK(proto::decode_envelope(frames[1].data(), frames[1].size()).request_id == 3);
  auto env = proto::decode_envelope(frames[0].data(), frames[0].size());
  REQUIRE(env.type == static_cast<uint16_t>(proto::MsgType::kReplies));
  auto replies = proto::Replies::unpack(env.payload).replies;
  REQUIRE(replies.size() == 2);
  std::map<uint64_t, uint32_t> rank;
  for (const auto& r : replies) {
    auto e = proto::decode_envelope(r.frame.data(), r.frame.size());
    REQUIRE(e.type == static_cast<uint16_t>(proto::MsgType::kWorld));
    rank[e.request_id] = proto::World::unpack(e.payload).node_rank;
  }
  CHECK(rank == std::map<uint64_t, uint32_t>{{21, 0}, {22, 1}});
}
