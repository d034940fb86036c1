// Broadcast across nodes: four private daemons on loopback (daemon 0 the
// coordinator), one `muster run -n 2` per "node". The nodes share this
// machine, but the library never reads another node's memory: the bytes go
// through the daemons, which the coordinator's count in the job's store
// (muster/bcast/relayed) shows.
#include <signal.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <thread>

#include "support/bytes.hpp"
#include "support/cluster.hpp"

using namespace muster::test;
using namespace std::chrono_literals;

namespace {

// What tests/support/cluster_worker.cpp prints for these bytes.
uint64_t expected(size_t size, uint64_t seed, uint64_t h = 1469598103934665603ull) {
  std::vector<uint8_t> b(size);
  pattern(b.data(), size, seed);
  return digest(b.data(), size, h);
}

constexpr size_t kSize = (size_t{64} << 20) + 4097;  // 17 chunks of 4 MiB, the last one short

std::map<std::string, std::string> merged(const std::vector<std::string>& lines) {
  std::map<std::string, std::string> f;
  for (const auto& l : lines)
    for (auto& [k, v] : fields(l)) f[k] = v;
  return f;
}

// Reads each node's run to its end (within timeout; it must exit 0), then
// calls check(node, fields) for each of its workers (the worker's lines'
// fields merged), under INFOs naming the node's output and the worker.
// per_node > 0: each node must have had that many workers. How many
// workers there were in all.
template <class Check>
int on_each_worker(std::vector<std::unique_ptr<Process>>& runs, std::chrono::seconds timeout,
                   size_t per_node, Check check) {
  int ranks = 0;
  for (int node = 0; node < static_cast<int>(runs.size()); ++node) {
    auto text = runs[node]->read_all(timeout);
    INFO("node " << node << ":\n" << text);
    CHECK(runs[node]->wait(10s) == 0);
    auto workers = by_worker(text);
    if (per_node > 0) CHECK(workers.size() == per_node);
    for (auto& [prefix, lines] : workers) {
      INFO(prefix);
      auto f = merged(lines);
      check(node, f);
      ++ranks;
    }
  }
  return ranks;
}

}  // namespace

TEST_CASE("broadcast bytes identical everywhere: 4 nodes x 2 ranks, roots 0 and 5",
          "[cluster][bcast]") {
  Cluster c(4);
  std::vector<std::unique_ptr<Process>> runs;
  for (int i = 0; i < 4; ++i)
    runs.push_back(c.run(i, "bcast4", "4", {"--node-rank", std::to_string(i)},
                         {"bcast", std::to_string(kSize), "0", "5"}));
  const std::string want0 = hex64(expected(kSize, 1)), want5 = hex64(expected(kSize, 6));
  // sync_model: rank 0's float32s, bytes and float64s (cluster_worker.cpp).
  const size_t floats = kSize / 4 * 4;
  const std::string want_sync =
      hex64(expected(777 * 8, 103, expected(1001, 102, expected(floats, 101))));
  const int ranks = on_each_worker(runs, 150s, 2, [&](int node, auto& f) {
    CHECK(f["node"] == std::to_string(node));
    CHECK(f.count("bcast_error") == 0);
    CHECK(f["bcast_0"] == want0);
    CHECK(f["bcast_5"] == want5);
    CHECK(f["bcast_empty"] == "ok");
    CHECK(f["sync"] == want_sync);
    CHECK(f["sync_reduce"] == "invalid_argument");
    // Each broadcast's bytes went from the coordinator to each of the
    // three nodes that do not hold its root.
    uint64_t relayed = 0;
    std::sscanf(f["relayed"].c_str(), "%llu", reinterpret_cast<unsigned long long*>(&relayed));
    CHECK(relayed >= 3 * (2 * kSize + floats));
    // Every node has two ranks, so each node's daemon wrote the chunks
    // into its relay rank's pool: all of them went as the one shared
    // frame (cluster/bcast_pools.cpp).
    CHECK(f["shared"] == f["relayed"]);
  });
  CHECK(ranks == 8);
}

namespace {

// Ranks broadcast from `root` in a loop; once the first broadcast is done
// everywhere and the root has started the second, daemon `victim` dies
// (or, with victim_rank >= 0, that rank's process). Every rank elsewhere
// must fail (peer_exited), and every broadcast it did complete must have
// the root's bytes. tree_width > 0: every daemon listens for peers, and
// the coordinator builds a relay tree that wide (see support/cluster.hpp).
void kill_mid_broadcast(uint32_t root, int victim, int victim_rank = -1, int tree_width = -1) {
  const int nodes = 4;
  Cluster c(nodes, tree_width);
  std::vector<std::unique_ptr<Process>> runs;
  // bcast-loop workers ignore SIGTERM (to report the broadcast's error
  // rather than die of the stop), so each stop lasts the whole grace: 2 s
  // here rather than torchrun's 30 s default.
  for (int i = 0; i < nodes; ++i)
    runs.push_back(c.run(i, "bcast-kill", std::to_string(nodes),
                         {"--node-rank", std::to_string(i), "--grace-period", "2"},
                         {"bcast-loop", std::to_string(kSize), std::to_string(root)}));
  std::vector<std::string> seen(nodes);
  // Reads node's output up to a line of worker `prefix` that holds `what`.
  auto read_until = [&](int node, const std::string& prefix, const std::string& what) {
    for (;;) {
      auto line = runs[node]->read_line(90s);
      INFO(seen[node]);
      REQUIRE(line);
      seen[node] += *line + "\n";
      if (line->rfind(prefix, 0) == 0 && line->find(what) != std::string::npos) return *line;
    }
  };
  pid_t victim_pid = 0;
  if (victim_rank >= 0)
    victim_pid = std::stoi(
        fields(read_until(victim, "[rank" + std::to_string(victim_rank % 2) + "]", "pid="))["pid"]);
  const int root_node = static_cast<int>(root / 2);
  read_until(root_node, "[rank" + std::to_string(root % 2) + "]", "bcast_start n=1");
  std::this_thread::sleep_for(30ms);  // into the transfer
  kill(victim_rank >= 0 ? victim_pid : c.daemons[victim]->pid(), SIGKILL);
  const std::string want = hex64(expected(kSize, root + 1));
  for (int node = 0; node < nodes; ++node) {
    auto text = seen[node] + runs[node]->read_all(60s);
    INFO("node " << node << ":\n" << text);
    auto code = runs[node]->wait(20s);
    REQUIRE(code);
    CHECK(*code != 0);
    if (node == victim && victim_rank < 0) {
      CHECK(text.find("lost the node's daemon") != std::string::npos);
      continue;
    }
    auto workers = by_worker(text);
    CHECK(workers.size() == 2);
    for (auto& [prefix, lines] : workers) {
      INFO(prefix);
      if (node == victim && prefix == "[rank" + std::to_string(victim_rank % 2) + "]") continue;
      int done = 0;
      bool failed = false;
      for (const auto& l : lines) {
        auto f = fields(l);
        if (f.count("bcast")) {
          CHECK(f["bcast"] == want);  // never other bytes
          ++done;
        }
        if (f.count("bcast_error")) {
          failed = true;
          CHECK(f["bcast_error"] == "peer_exited");
        }
      }
      CHECK(done >= 1);
      if (node == victim)
        // The killed rank's neighbour: muster run stops it when the rank
        // dies, maybe before the error reaches it.
        CHECK((failed || text.find("stopping the other") != std::string::npos));
      else if (victim == 0 && victim_rank < 0)
        // The coordinator's loss: the node's muster run may stop the rank
        // (the world broke) before the error reaches it.
        CHECK((failed || text.find("world broke") != std::string::npos));
      else
        CHECK(failed);
    }
  }
}

}  // namespace

TEST_CASE("a broadcast whose root's daemon dies fails on every other rank", "[cluster][bcast]") {
  kill_mid_broadcast(5, 2);  // rank 5 lives on node 2, whose daemon is not the coordinator
}

TEST_CASE("a broadcast whose coordinator dies fails on every other rank", "[cluster][bcast]") {
  kill_mid_broadcast(0, 0);  // rank 0 lives on node 0, whose daemon coordinates
}

TEST_CASE("a broadcast whose relay rank dies fails on every other rank", "[cluster][bcast]") {
  kill_mid_broadcast(0, 1, 2);  // rank 2: local rank 0 of node 1, which relays to rank 3
}

TEST_CASE("a broadcast whose middle node's daemon dies fails on every other rank",
          "[cluster][bcast]") {
  // Every daemon listens for peers, relays in a tree of width 1 (a chain
  // 0-1-2-3): node 1's daemon, between the root's node and the last two,
  // is neither the root's nor the coordinator.
  kill_mid_broadcast(0, 1, -1, 1);
}

namespace {

// Runs `bcast SIZE ROOT_A ROOT_B` on every node of c as job `job`; checks
// that each run exits 0 and that every rank holds both roots' bytes, then
// calls more(rank's fields); returns the number of ranks seen.
template <class More>
int broadcast_everywhere(Cluster& c, const std::string& job, uint32_t a, uint32_t b, More more) {
  const int nodes = static_cast<int>(c.daemons.size());
  std::vector<std::unique_ptr<Process>> runs;
  for (int i = 0; i < nodes; ++i)
    runs.push_back(c.run(i, job, std::to_string(nodes), {"--node-rank", std::to_string(i)},
                         {"bcast", std::to_string(kSize), std::to_string(a), std::to_string(b)}));
  const std::string want_a = hex64(expected(kSize, a + 1));
  const std::string want_b = hex64(expected(kSize, b + 1));
  return on_each_worker(runs, 150s, 0, [&](int, auto& f) {
    CHECK(f.count("bcast_error") == 0);
    // The digest of every byte each rank holds after the call: the
    // root's, through every hop (each chunk checked on the way too).
    CHECK(f["bcast_" + std::to_string(a)] == want_a);
    CHECK(f["bcast_" + std::to_string(b)] == want_b);
    more(f);
  });
}

}  // namespace

TEST_CASE("broadcast bytes intact through 3 listening node daemons, roots on the first and last",
          "[cluster][bcast]") {
  Cluster c(3, 1);  // every daemon listens; the relay tree is a chain
  const int ranks = broadcast_everywhere(c, "bcast3", 0, 5, [](auto&) {});
  CHECK(ranks == 6);
}

TEST_CASE("ranks whose daemons cannot open their pools send the bytes themselves",
          "[cluster][bcast]") {
  // Both daemons refused /proc/<pid>/fd (support/deny_pools.c): the root's
  // first push and the relay's first pull that name their streams are
  // refused with permission_denied, and both go on with bytes.
  Cluster c(0);
  const char* asan = std::getenv("ASAN_OPTIONS");
  for (int i = 0; i < 2; ++i) {
    std::vector<std::string> args = {"--peer-plain", "--peer-timeout", "2"};
    if (i == 0)
      args.insert(args.end(), {"--peer-bind", "127.0.0.1", "--peer-port", std::to_string(c.port)});
    c.daemons.push_back(std::make_unique<TestDaemon>(
        args, std::map<std::string, std::string>{
                  {"LD_PRELOAD", program("MUSTER_TEST_DENY_POOLS")},
                  {"ASAN_OPTIONS", std::string(asan ? asan : "") + ":verify_asan_link_order=0"}}));
  }
  const int ranks = broadcast_everywhere(c, "denied", 0, 3, [](auto& f) {
    // Every byte went through the sockets, none as a shared frame.
    CHECK(f["shared"] == "0");
    CHECK(f["relayed"] != "0");
  });
  CHECK(ranks == 4);
}

namespace {

// Ranks 2 and 5 pass a buffer of another size; tree_width as in
// kill_mid_broadcast (16: every daemon listens, chunks go along a chain).
void mismatch(int tree_width) {
  Cluster c(4, tree_width);
  const size_t size = (size_t{9} << 20) + 5;
  std::vector<std::unique_ptr<Process>> runs;
  // Rank 2 relays to rank 3 (node 1), rank 5 only reads (node 2).
  for (int i = 0; i < 4; ++i)
    runs.push_back(c.run(i, "bcast-sizes", "4", {"--node-rank", std::to_string(i)},
                         {"bcast-mismatch", std::to_string(size), "0", "2", "5"}));
  const std::string want = hex64(expected(size, 1));
  on_each_worker(runs, 90s, 2, [&](int, auto& f) {
    int rank = std::stoi(f["rank"]);
    // Rank 2's node gets no bytes it could trust: its relay's buffer is
    // not the root's size.
    if (rank == 2 || rank == 3 || rank == 5) {
      CHECK(f["bcast_error"] == "invalid_argument");
      CHECK(f.count("bcast") == 0);
    } else {
      CHECK(f["bcast"] == want);
      CHECK(f.count("bcast_error") == 0);
    }
    CHECK(f["bcast_after"] == want);
  });
}

}  // namespace

TEST_CASE("a rank whose buffer has another size fails alone; the next broadcast works",
          "[cluster][bcast]") {
  mismatch(-1);
}

TEST_CASE("along the chain, a relay whose buffer has another size fails alone; its daemon goes on",
          "[cluster][bcast]") {
  // Node 1 is second in the chain 0-1-2-3: its daemon pulls for node 2
  // itself once its relay (rank 2) gave up.
  mismatch(16);
}

// Every daemon listens (width 16 > 4 nodes: no relay tree): chunks go node
// to node along the chain that starts at the root's node, and wraps.
TEST_CASE("along a chain of 4 listening nodes the coordinator carries no bytes; roots 3 and 4",
          "[cluster][bcast]") {
  Cluster c(0);
  TempDir logs;
  const std::string log0 = logs.path() + "/coordinator.log";
  add_listening(c, 4, "16", log0);
  const int ranks = broadcast_everywhere(c, "chain4", 3, 4, [](auto& f) {
    CHECK(f["relayed"] == "none");  // the coordinator relayed no byte of either
  });
  CHECK(ranks == 8);
  const std::string log = slurp(log0);
  INFO(log);
  CHECK(log.find("broadcasts go node to node along a chain") != std::string::npos);
  // Node 0's daemon passed each broadcast on (to node 1 for root 4's, whose
  // chain is 2-3-0-1), except root 3's, whose chain (1-2-3-0) ends with it.
  CHECK(log.find("broadcast #1 of job 'chain4' from rank 3, " + std::to_string(kSize) +
                 " bytes: 0 bytes passed to the next node") != std::string::npos);
  CHECK(log.find("broadcast #2 of job 'chain4' from rank 4, " + std::to_string(kSize) +
                 " bytes: " + "0 bytes passed") == std::string::npos);
}

TEST_CASE("where a node's daemon does not listen, chunks go through the coordinator, logged",
          "[cluster][bcast]") {
  TempDir logs;
  const std::string log0 = logs.path() + "/coordinator.log";
  Cluster c(0);
  c.daemons.push_back(std::make_unique<TestDaemon>(
      std::vector<std::string>{"--peer-plain", "--peer-timeout", "2", "--peer-bind", "127.0.0.1",
                               "--peer-port", std::to_string(c.port), "--log-level", "info"},
      std::map<std::string, std::string>{{"MUSTER_LOG_SINK", "file:" + log0}}));
  c.daemons.push_back(std::make_unique<TestDaemon>(
      std::vector<std::string>{"--peer-plain", "--peer-timeout", "2"}));
  const int ranks = broadcast_everywhere(c, "deaf", 0, 3, [](auto& f) {
    CHECK(f["relayed"] != "none");  // through the coordinator
  });
  CHECK(ranks == 4);
  const std::string log = slurp(log0);
  INFO(log);
  CHECK(log.find("broadcasts go through the coordinator, not node to node: node 1") !=
        std::string::npos);
}

TEST_CASE("along the chain, a broadcast whose root's daemon dies fails on every other rank",
          "[cluster][bcast]") {
  kill_mid_broadcast(5, 2, -1, 16);  // node 2 heads the chain 2-3-0-1
}

TEST_CASE("along the chain, a broadcast whose relay rank dies fails on every other rank",
          "[cluster][bcast]") {
  kill_mid_broadcast(0, 1, 2, 16);  // node 1 is second in the chain 0-1-2-3
}
