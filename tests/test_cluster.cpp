// Multi-node jobs on loopback: several private daemons (own runtime dirs,
// own ports), one `muster run` per "node", the coordinator on one of them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include "muster/client.hpp"
#include "sampler/sampler.hpp"
#include "support/bytes.hpp"
#include "support/cluster.hpp"
#include "support/process.hpp"

using namespace muster::test;
using namespace std::chrono_literals;

TEST_CASE("four daemons run one job of 4 nodes x 2 ranks as one world", "[cluster]") {
  Cluster c(4);
  std::vector<std::unique_ptr<Process>> runs;
  // Started in reverse: the node ranks come from --node-rank, not arrival.
  for (int i = 3; i >= 0; --i)
    runs.push_back(c.run(i, "four", "4", {"--node-rank", std::to_string(i)}));
  std::vector<std::map<std::string, std::string>> ranks;  // merged fields per rank line
  std::map<int, std::map<std::string, std::string>> by_rank;
  for (size_t k = 0; k < runs.size(); ++k) {
    int node = 3 - static_cast<int>(k);
    auto text = runs[k]->read_all(60s);
    INFO("node " << node << " output:\n" << text);
    REQUIRE(runs[k]->wait(10s) == 0);
    // Each worker prints its lines under its own [rankN]: prefix (local rank).
    std::map<std::string, std::map<std::string, std::string>> per_local;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("[rank", 0) != 0) continue;
      auto& f = per_local[line.substr(0, line.find(']'))];
      for (auto& [k2, v] : fields(line)) f[k2] = v;
    }
    REQUIRE(per_local.size() == 2);
    for (auto& [prefix, f] : per_local) {
      CHECK(f["node"] == std::to_string(node));
      CHECK(f["nodes"] == "4");
      CHECK(f["world"] == "8");
      int rank = std::stoi(f["rank"]);
      CHECK(rank == 2 * node + std::stoi(f["local_rank"]));
      CHECK(by_rank.count(rank) == 0);
      by_rank[rank] = f;
    }
  }
  REQUIRE(by_rank.size() == 8);
  CHECK(by_rank.begin()->first == 0);
  CHECK(by_rank.rbegin()->first == 7);
  for (auto& [rank, f] : by_rank) {
    INFO("rank " << rank);
    CHECK(f["id"] == by_rank[0]["id"]);
    CHECK(f["ids"] == by_rank[0]["ids"]);
    CHECK(f["store"] == "ok");
    CHECK(f["generation"] == by_rank[0]["generation"]);
    // The shard is torch's DistributedSampler for world 8 (the sampler
    // library is checked against torch's own output in test_sampler).
    muster::ShardSpec spec{1000, 3, 7, true, false, 8, static_cast<uint32_t>(rank)};
    auto want = muster::shard_indices(spec);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%zu:%016llx", want.size(),
                  static_cast<unsigned long long>(fnv(want.data(), want.size() * 8)));
    CHECK(f["shard"] == buf);
  }
  CHECK(by_rank[0]["id"].size() == 16);
}

TEST_CASE("a daemon killed mid-job is detected and every surviving rank is told", "[cluster]") {
  Cluster c(3);
  std::vector<std::unique_ptr<Process>> runs;
  for (int i = 0; i < 3; ++i)
    runs.push_back(c.run(i, "lossy", "3", {"--node-rank", std::to_string(i)}, {"hold-nosigterm"}));
  // Everyone got through the store and the barrier: the world works.
  for (auto& r : runs) {
    int shards = 0;
    while (shards < 2) {
      auto line = r->read_line(30s);
      REQUIRE(line);
      if (line->find("shard=") != std::string::npos) ++shards;
    }
  }
  std::this_thread::sleep_for(300ms);  // into the held wait
  kill(c.daemons[2]->pid(), SIGKILL);
  // Nodes 0 and 1: their waiting ranks fail naming the lost node, then
  // muster run stops the group (no restarts allowed) and fails.
  for (int i = 0; i < 2; ++i) {
    auto text = runs[i]->read_all(30s);
    INFO("node " << i << ":\n" << text);
    CHECK(text.find("wait_error=peer_exited") != std::string::npos);
    CHECK(text.find("node 2") != std::string::npos);
    CHECK(text.find("lost") != std::string::npos);
    auto code = runs[i]->wait(10s);
    REQUIRE(code);
    CHECK(*code != 0);
  }
  // Node 2 lost its own daemon: its muster run stops its workers too.
  auto text = runs[2]->read_all(30s);
  INFO("node 2:\n" << text);
  CHECK(text.find("lost the node's daemon") != std::string::npos);
  auto code = runs[2]->wait(10s);
  REQUIRE(code);
  CHECK(*code != 0);
}

TEST_CASE("a node that joins late waits for the next generation, which includes it", "[cluster]") {
  Cluster c(3);
  std::vector<std::unique_ptr<Process>> runs;
  // What each run printed so far, for the failure message.
  std::map<Process*, std::string> seen;
  auto first_rank_line = [&](Process& p) -> std::map<std::string, std::string> {
    for (;;) {
      auto line = p.read_line(60s);
      if (!line) return {};
      seen[&p] += *line + "\n";
      if (line->find("rank=") != std::string::npos) return fields(*line);
    }
  };
  for (int i = 0; i < 2; ++i)
    runs.push_back(c.run(i, "late", "2:3", {"--last-call", "5"}, {"hold"}));
  for (auto& r : runs) {
    auto f = first_rank_line(*r);
    CHECK(f["generation"] == "0");
    CHECK(f["world"] == "4");
  }
  runs.push_back(c.run(2, "late", "2:3", {"--last-call", "5"}, {"hold"}));
  // The late node never runs in generation 0; the two others restart into
  // a later generation that has all three nodes (normally generation 1; a
  // node slower than the last call makes it one more).
  std::set<std::string> generations;
  for (auto& r : runs) {
    std::map<std::string, std::string> f;
    do {
      f = first_rank_line(*r);
      INFO("node 0:\n"
           << seen[runs[0].get()] << "node 1:\n"
           << seen[runs[1].get()] << "node 2:\n"
           << seen[runs[2].get()]);
      REQUIRE(!f.empty());
      if (r == runs.back()) CHECK(f["generation"] != "0");
    } while (f["world"] != "6");
    CHECK(f["nodes"] == "3");
    generations.insert(f["generation"]);
  }
  CHECK(generations.size() == 1);
  CHECK(*generations.begin() != "0");
  for (auto& r : runs) r->signal(SIGTERM);
  for (auto& r : runs) CHECK(r->wait(20s));
}

TEST_CASE("a daemon without an authorised key cannot join a job", "[cluster][curve]") {
  TempDir keys;
  auto keygen = [&](const std::string& name) {
    Process p({program("MUSTER_TEST_MUSTER"), "keygen", "--out", keys.path() + "/" + name});
    REQUIRE(p.wait(10s) == 0);
    std::ifstream in(keys.path() + "/" + name);
    std::string line, pub;
    while (std::getline(in, line))
      if (line.rfind("public", 0) == 0) pub = line.substr(line.find('=') + 1);
    pub.erase(0, pub.find_first_not_of(' '));
    return pub;
  };
  std::string cluster_pub = keygen("cluster.key");
  keygen("stranger.key");
  int port = free_port();
  TestDaemon coord({"--peer-key-file", keys.path() + "/cluster.key", "--peer-timeout", "2",
                    "--peer-bind", "127.0.0.1", "--peer-port", std::to_string(port)});
  TestDaemon member({"--peer-key-file", keys.path() + "/cluster.key", "--peer-timeout", "2"});
  TestDaemon stranger({"--peer-key-file", keys.path() + "/stranger.key", "--peer-server-key",
                       cluster_pub, "--peer-timeout", "2"});
  auto run = [&](TestDaemon& d, const std::string& job, const std::string& nnodes) {
    return std::make_unique<Process>(
        std::vector<std::string>{program("MUSTER_TEST_MUSTER"), "run", "--nnodes", nnodes, "-n",
                                 "1", "--coordinator", "127.0.0.1:" + std::to_string(port),
                                 "--job-id", job, "--cpu", "--use-env", "--rdzv-timeout", "20",
                                 program("MUSTER_TEST_CLUSTER_WORKER")},
        std::map<std::string, std::string>{{"MUSTER_ENDPOINT", d.endpoint()}}, true);
  };
  // The stranger's handshake is refused: it never hears from the
  // coordinator and gives up after the peer timeout.
  auto refused = run(stranger, "guarded", "2");
  auto text = refused->read_all(30s);
  INFO(text);
  CHECK(text.find("lost contact with the coordinator") != std::string::npos);
  CHECK(refused->wait(5s) == 1);
  // The same job with a daemon that holds the cluster key works.
  auto a = run(coord, "guarded", "2");
  auto b = run(member, "guarded", "2");
  auto ta = a->read_all(40s), tb = b->read_all(40s);
  INFO(ta << "\n---\n" << tb);
  CHECK(a->wait(5s) == 0);
  CHECK(b->wait(5s) == 0);
  CHECK(ta.find("store=ok") != std::string::npos);
  CHECK(tb.find("store=ok") != std::string::npos);
}

TEST_CASE("with more nodes than the tree width, barriers and key waits go through relays",
          "[cluster]") {
  // Width 2, 5 nodes: the coordinator's children are nodes 0 and 1; node 0
  // relays for nodes 2 and 3, node 1 for node 4.
  Cluster c(5, 2);
  c.nproc = "1";
  std::vector<std::unique_ptr<Process>> runs;
  for (int i = 0; i < 5; ++i)
    runs.push_back(c.run(i, "tree", "5", {"--node-rank", std::to_string(i)}));
  std::map<int, std::map<std::string, std::string>> by_rank;
  for (int i = 0; i < 5; ++i) {
    auto text = runs[i]->read_all(60s);
    INFO("node " << i << ":\n" << text);
    REQUIRE(runs[i]->wait(10s) == 0);
    std::map<std::string, std::string> f;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);)
      if (line.rfind("[rank", 0) == 0)
        for (auto& [k, v] : fields(line)) f[k] = v;
    CHECK(f["rank"] == std::to_string(i));
    CHECK(f["world"] == "5");
    CHECK(f["store"] == "ok");
    by_rank[i] = f;
  }
  for (auto& [rank, f] : by_rank) {
    CHECK(f["id"] == by_rank[0]["id"]);
    CHECK(f["ids"] == by_rank[0]["ids"]);
  }
}

TEST_CASE("an NCCL id a node fetched once is answered there, never fetched again upstream",
          "[cluster]") {
  // Width 2, 5 nodes of one rank as above. Each job's ranks get the "world"
  // id once (nccl_unique_id), then `regets` times more: a node keeps a
  // set-once key's value and answers those itself, so the coordinator
  // handles no more requests for 300 regets than for none. Without it,
  // each of the 4 ranks off the coordinator would cost it 300 more.
  Cluster c(5, 2);
  c.nproc = "1";
  auto handled = [&] { return muster::Client({c.daemons[0]->endpoint()}).status().peer_requests; };
  auto job = [&](const std::string& id, const std::string& regets) {
    const uint64_t before = handled();
    std::vector<std::unique_ptr<Process>> runs;
    for (int i = 0; i < 5; ++i)
      runs.push_back(c.run(i, id, "5", {"--node-rank", std::to_string(i)}, {"regets", regets}));
    for (int i = 0; i < 5; ++i) {
      auto text = runs[i]->read_all(60s);
      INFO("node " << i << ":\n" << text);
      REQUIRE(runs[i]->wait(10s) == 0);
      CHECK(text.find("regets=ok") != std::string::npos);
    }
    return handled() - before;
  };
  const uint64_t none = job("regets-0", "0");
  const uint64_t many = job("regets-300", "300");
  INFO("coordinator requests: " << none << " for no regets, " << many << " for 300 each");
  CHECK(many < none + 300);
}

TEST_CASE("without node daemons, muster run's embedded daemons form the world", "[cluster]") {
  int port = free_port();
  TempDir a, b;
  auto run = [&](const TempDir& dir, std::vector<std::string> peering) {
    std::vector<std::string> argv = {program("MUSTER_TEST_MUSTER"),
                                     "run",
                                     "--nnodes",
                                     "2",
                                     "-n",
                                     "2",
                                     "--coordinator",
                                     "127.0.0.1:" + std::to_string(port),
                                     "--job-id",
                                     "embedded",
                                     "--cpu",
                                     "--use-env"};
    argv.insert(argv.end(), peering.begin(), peering.end());
    argv.push_back(program("MUSTER_TEST_CLUSTER_WORKER"));
    return std::make_unique<Process>(
        argv,
        std::map<std::string, std::string>{{"MUSTER_ENDPOINT", ""},
                                           {"MUSTER_RUNTIME_DIR", dir.path()}},
        true);
  };
  // Neither keys nor --peer-plain: refused before anything starts (a
  // usage error) with the command line's flags, not a hang.
  {
    auto p = run(a, {});
    auto text = p->read_all(30s);
    INFO(text);
    CHECK(p->wait(5s) == 2);
    CHECK(text.find("--peer-key-file FILE") != std::string::npos);
    CHECK(text.find("muster keygen") != std::string::npos);
  }
  // The node whose address is the coordinator's and whose port is free
  // hosts it; the other connects.
  auto p0 = run(a, {"--peer-plain"});
  auto p1 = run(b, {"--peer-plain"});
  auto t0 = p0->read_all(60s), t1 = p1->read_all(60s);
  INFO(t0 << "\n---\n" << t1);
  CHECK(p0->wait(5s) == 0);
  CHECK(p1->wait(5s) == 0);
  for (const auto* t : {&t0, &t1}) {
    CHECK(t->find("world=4") != std::string::npos);
    CHECK(t->find("store=ok") != std::string::npos);
  }
}

TEST_CASE("torch's newer Store API works across nodes through the coordinator", "[cluster]") {
  Cluster c(2);
  std::vector<std::unique_ptr<Process>> runs;
  for (int i = 0; i < 2; ++i)
    runs.push_back(c.run(i, "api", "2", {"--node-rank", std::to_string(i)}, {"store-api"}));
  size_t ok = 0;
  for (auto& run : runs) {
    auto text = run->read_all(90s);
    INFO("output:\n" << text);
    CHECK(run->wait(10s) == 0);
    for (auto& [prefix, lines] : by_worker(text))
      for (auto& line : lines)
        if (auto f = fields(line); f.count("api")) {
          CHECK(f["api"] == "ok");
          ok += f["api"] == "ok";
        }
  }
  CHECK(ok == 4);
}
