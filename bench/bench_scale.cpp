// Scale: wire-up of a multi-node job of N ranks simulated on one machine,
// N/16 node daemons x 16 ranks on loopback, through a coordinating daemon
// that is either a flat star (--tree-width 0) or a relay tree
// (--tree-width W; every node daemon listens so that nodes can relay).
//
// One run: per node, one launcher thread does what `muster run` does
// (muster::reserve of 16 local ranks for this pid, then
// muster::rendezvous through the coordinator with a fixed node rank); once
// every node has its world, 16 rank threads per node join with an explicit
// local rank (the reserved slots belong to this pid, so its threads may
// take them), get the 128-byte NCCL unique id and pass a barrier. Clients
// connect before the start (like TCPStore's constructor): untimed.
//   muster_s       from the first reservation until every rank passed the
//                  barrier
//   world_s        of that, until every node had its world (rendezvous)
//   after_world_s  the rest: join, NCCL id, barrier
//   coordinator_msgs  requests the coordinator received from peer daemons
//                  during the run (Client::status().peer_requests, read
//                  before and after), split as rendezvous_msgs (node joins
//                  and each node's first heartbeat) and after_world_msgs
//                  (NCCL id publish + waits, barrier arrivals); and,
//                  not part of it, teardown_msgs: those of the ranks'
//                  leave (one RankExited per rank, one NodeLeave per node)
// The count after the world varies with timing: a node (and a relay, for
// its subtree) sends one upstream wait for all its ranks waiting for the
// same key at once, but a rank whose get comes after that wait was
// answered sends a new one. So the NCCL id costs the coordinator from one
// request per node (star) or per child (tree) up to one per rank, and the
// barrier one per node or per child.
// The split waits for all nodes' worlds before the ranks start (a real
// node's workers start when its own world comes; all worlds are sent at
// once, so this costs little). Heartbeats go every --peer-timeout / 4; the
// daemons run with --peer-timeout 30 so that a run sees exactly the first
// heartbeat of each node (idle daemons with no job send none; the program
// checks that and prints the idle rate).
//
// The coordinator is a daemon of its own that hosts no ranks, so that its
// count is the coordinator's alone (one of the nodes' daemons could
// coordinate as well; it would add its own node's requests and, in the
// tree, those of its relay children). The node daemons are shared by the
// topologies: one coordinating daemon per topology.
//
// Daemons run in private runtime directories under /dev/shm when it exists
// (else the temp dir): they save their state with fsync before answering,
// and tmpfs keeps that cheap, as /run does on a real node.
//
//   bench_scale MUSTERD [--runs R] [N...]     (N: multiples of 16;
//                                               default 64 256 1024, R = 3)
// prints per measurement the median of each field over R runs (and the
// range of coordinator_msgs, which varies with timing, see above):
//   bench scale_N_TOPOLOGY muster_s=X coordinator_msgs=M world_s=..
//       after_world_s=.. rendezvous_msgs=.. after_world_msgs=..
//       coordinator_msgs_min=.. coordinator_msgs_max=.. teardown_msgs=.. nodes=..
// then a Markdown table.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "muster/broadcast.hpp"
#include "muster/client.hpp"
#include "muster/launcher.hpp"
#include "peer_daemons.hpp"
#include "timing.hpp"

using namespace std::chrono;
using muster::bench::Clock;
using muster::bench::Daemon;
using muster::bench::free_port;
using muster::bench::Gate;
using muster::bench::peer_requests;
using muster::bench::raise_fd_limit;
using muster::bench::runtime_base;
using muster::bench::settle;
using std::chrono::seconds;

namespace {

constexpr uint32_t kRanksPerNode = 16;

struct Topology {
  std::string name;  // star, tree4, tree16
  int width = 0;
  int port = 0;
  std::unique_ptr<Daemon> coordinator;
};

struct Result {
  double muster_s = 0, world_s = 0, after_world_s = 0;
  uint64_t msgs = 0, rendezvous_msgs = 0, after_world_msgs = 0, teardown_msgs = 0;
};

Result run_once(const std::vector<std::unique_ptr<Daemon>>& nodes_d, const Topology& topo,
                uint32_t ranks, int run) {
  const uint32_t nodes = ranks / kRanksPerNode;
  const std::string job =
      "scale-" + std::to_string(ranks) + "-" + topo.name + "-" + std::to_string(run);
  const std::string coordinator = "127.0.0.1:" + std::to_string(topo.port);
  Gate start, ranks_go, leave;
  std::atomic<uint32_t> ready{0}, formed{0}, failures{0}, done{0};
  std::vector<Clock::time_point> world_at(nodes), done_at(ranks);
  std::vector<std::string> ids(ranks);
  std::vector<std::thread> threads;
  threads.reserve(nodes + ranks);
  auto fail = [&](const char* who, uint32_t i, const std::exception& e) {
    std::fprintf(stderr, "bench_scale %s: %s %u: %s\n", job.c_str(), who, i, e.what());
    ++failures;
  };
  for (uint32_t n = 0; n < nodes; ++n)
    threads.emplace_back([&, n] {
      try {
        muster::Client c({nodes_d[n]->endpoint(), seconds(60)});
        ++ready;
        start.wait();
        muster::reserve(c, job, kRanksPerNode, false, {}, getpid(), 0);
        muster::RendezvousOptions o;
        o.coordinator = coordinator;
        o.node_rank = static_cast<int>(n);
        o.min_nodes = o.max_nodes = nodes;
        o.timeout = seconds(60);
        o.master_addr = "127.0.0.1";
        auto w = muster::rendezvous(c, job, o);
        world_at[n] = Clock::now();
        if (w.node_rank != n || w.world_size != ranks || w.rank_offset != n * kRanksPerNode)
          throw std::runtime_error("wrong world: node " + std::to_string(w.node_rank) + " of " +
                                   std::to_string(w.num_nodes) + ", world " +
                                   std::to_string(w.world_size));
      } catch (const std::exception& e) {
        fail("node", n, e);
      }
      ++formed;
    });
  for (uint32_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      uint32_t node = r / kRanksPerNode, local = r % kRanksPerNode;
      try {
        muster::Client c({nodes_d[node]->endpoint(), seconds(60)});
        ++ready;
        ranks_go.wait();
        muster::JoinOptions jo;
        jo.job = job;
        jo.local_world_size = kRanksPerNode;
        jo.wants_gpu = false;
        jo.local_rank = static_cast<int>(local);
        auto info = c.join(jo);
        if (info.rank != r || info.world_size != ranks)
          throw std::runtime_error("joined as rank " + std::to_string(info.rank) + " of " +
                                   std::to_string(info.world_size));
        ids[r] = muster::nccl_unique_id(c, "world", seconds(60));
        c.barrier("wired", seconds(60));
        done_at[r] = Clock::now();
        ++done;
        leave.wait();
        c.leave();
      } catch (const std::exception& e) {
        fail("rank", r, e);
        ++done;
      }
    });
  while (ready < nodes + ranks) std::this_thread::sleep_for(milliseconds(2));
  uint64_t before = settle(*topo.coordinator);
  auto t0 = Clock::now();
  start.release();
  while (formed < nodes) std::this_thread::sleep_for(microseconds(200));
  uint64_t mid = peer_requests(*topo.coordinator);
  ranks_go.release();
  while (done < ranks) std::this_thread::sleep_for(microseconds(200));
  uint64_t after = peer_requests(*topo.coordinator);
  leave.release();
  for (auto& t : threads) t.join();
  if (failures)
    throw std::runtime_error(job + ": " + std::to_string(failures.load()) + " failure(s)");
  for (uint32_t r = 0; r < ranks; ++r)
    if (ids[r].size() != 128 || ids[r] != ids[0])
      throw std::runtime_error(job + ": rank " + std::to_string(r) + " got another NCCL id");
  auto t_world = *std::max_element(world_at.begin(), world_at.end());
  auto t_end = *std::max_element(done_at.begin(), done_at.end());
  // Teardown (every rank left: one RankExited per rank and one NodeLeave
  // per node reach the coordinator) is over before the next run starts.
  for (const auto& d : nodes_d) {
    muster::Client c({d->endpoint()});
    for (int i = 0; i < 500 && !c.status().jobs.empty(); ++i)
      std::this_thread::sleep_for(milliseconds(10));
  }
  uint64_t gone = settle(*topo.coordinator);
  Result res;
  res.muster_s = muster::bench::seconds(t_end - t0);
  res.world_s = muster::bench::seconds(t_world - t0);
  res.after_world_s = muster::bench::seconds(t_end - t_world);
  res.msgs = after - before;
  res.rendezvous_msgs = mid - before;
  res.after_world_msgs = after - mid;
  res.teardown_msgs = gone - after;
  return res;
}

int run(int argc, char** argv) {
  std::string musterd = argv[1];
  int runs = 3;
  std::vector<uint32_t> sizes;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc)
      runs = std::max(1, std::atoi(argv[++i]));
    else
      sizes.push_back(static_cast<uint32_t>(std::atoi(argv[i])));
  }
  if (sizes.empty()) sizes = {64, 256, 1024};
  for (auto n : sizes)
    if (n == 0 || n % kRanksPerNode != 0)
      throw std::runtime_error("sizes must be multiples of " + std::to_string(kRanksPerNode));
  uint32_t max_nodes = *std::max_element(sizes.begin(), sizes.end()) / kRanksPerNode;
  raise_fd_limit();
  signal(SIGPIPE, SIG_IGN);

  std::string base = runtime_base();
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{base};
  std::fprintf(stderr, "bench_scale: %u node daemons + 3 coordinators, runtime dirs in %s\n",
               max_nodes, base.c_str());
  std::vector<Topology> topos(3);
  topos[0].name = "star", topos[1].name = "tree4", topos[2].name = "tree16";
  topos[1].width = 4, topos[2].width = 16;
  for (auto& t : topos) {
    t.port = free_port();
    t.coordinator = std::make_unique<Daemon>(
        musterd, base + "/coord-" + t.name,
        std::vector<std::string>{"--peer-bind", "127.0.0.1", "--peer-port", std::to_string(t.port),
                                 "--tree-width", std::to_string(t.width)});
  }
  std::vector<std::unique_ptr<Daemon>> nodes;
  for (uint32_t i = 0; i < max_nodes; ++i)
    nodes.push_back(std::make_unique<Daemon>(
        musterd, base + "/node" + std::to_string(i),
        std::vector<std::string>{"--peer-bind", "127.0.0.1", "--peer-port", "0"}));
  for (auto& t : topos) t.coordinator->wait_ready();
  for (auto& d : nodes) d->wait_ready();

  // Idle daemons (no job) send nothing: check it, and say so.
  auto idle0 = Clock::now();
  std::vector<uint64_t> idle_before;
  for (auto& t : topos) idle_before.push_back(peer_requests(*t.coordinator));
  std::this_thread::sleep_for(milliseconds(500));
  uint64_t idle = 0;
  for (size_t i = 0; i < topos.size(); ++i)
    idle += peer_requests(*topos[i].coordinator) - idle_before[i];
  std::fprintf(stderr, "bench_scale: idle coordinators received %.1f requests/s\n",
               idle / muster::bench::seconds(Clock::now() - idle0));

  struct Row {
    uint32_t ranks;
    std::string topo;
    Result r;  // the median of each field over the runs
    uint64_t msgs_min, msgs_max;
  };
  std::vector<Row> rows;
  for (auto n : sizes)
    for (auto& t : topos) {
      // A tree pays only with more nodes than its width (else the
      // coordinator makes a star anyway): tree16 only at 1,024 ranks.
      if (t.width > 0 && n / kRanksPerNode <= static_cast<uint32_t>(t.width)) continue;
      std::vector<Result> rs;
      for (int k = 0; k < runs; ++k) rs.push_back(run_once(nodes, t, n, k));
      auto med = [&](auto field) {
        std::vector<double> v;
        for (const auto& r : rs) v.push_back(static_cast<double>(r.*field));
        return muster::bench::median(v);
      };
      Result m;
      m.muster_s = med(&Result::muster_s);
      m.world_s = med(&Result::world_s);
      m.after_world_s = med(&Result::after_world_s);
      m.msgs = static_cast<uint64_t>(med(&Result::msgs));
      m.rendezvous_msgs = static_cast<uint64_t>(med(&Result::rendezvous_msgs));
      m.after_world_msgs = static_cast<uint64_t>(med(&Result::after_world_msgs));
      m.teardown_msgs = static_cast<uint64_t>(med(&Result::teardown_msgs));
      auto [lo, hi] = std::minmax_element(
          rs.begin(), rs.end(), [](const Result& a, const Result& b) { return a.msgs < b.msgs; });
      Row row{n, t.name, m, lo->msgs, hi->msgs};
      std::printf(
          "bench scale_%u_%s muster_s=%.4f coordinator_msgs=%llu world_s=%.4f after_world_s=%.4f "
          "rendezvous_msgs=%llu after_world_msgs=%llu coordinator_msgs_min=%llu "
          "coordinator_msgs_max=%llu teardown_msgs=%llu nodes=%u\n",
          n, t.name.c_str(), m.muster_s, static_cast<unsigned long long>(m.msgs), m.world_s,
          m.after_world_s, static_cast<unsigned long long>(m.rendezvous_msgs),
          static_cast<unsigned long long>(m.after_world_msgs),
          static_cast<unsigned long long>(row.msgs_min),
          static_cast<unsigned long long>(row.msgs_max),
          static_cast<unsigned long long>(m.teardown_msgs), n / kRanksPerNode);
      std::fflush(stdout);
      rows.push_back(row);
    }
  std::printf(
      "\n| ranks | nodes | topology | wire-up (s) | until world (s) | after world (s) | "
      "coordinator msgs (min-max) | of them after world |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& row : rows)
    std::printf("| %u | %u | %s | %.4f | %.4f | %.4f | %llu (%llu-%llu) | %llu |\n", row.ranks,
                row.ranks / kRanksPerNode, row.topo.c_str(), row.r.muster_s, row.r.world_s,
                row.r.after_world_s, static_cast<unsigned long long>(row.r.msgs),
                static_cast<unsigned long long>(row.msgs_min),
                static_cast<unsigned long long>(row.msgs_max),
                static_cast<unsigned long long>(row.r.after_world_msgs));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MUSTERD [--runs R] [N...]\n", argv[0]);
    return 2;
  }
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_scale: %s\n", e.what());
    return 1;
  }
}
