// Scale past what real daemons on one machine can reach: a swarm
// (swarm.hpp) speaks the peer protocol as thousands of node daemons of 8
// ranks each against one real coordinating musterd on loopback, and the
// wire-up of 16K, 32K and 100K ranks (2,048, 4,096 and 12,500 nodes) is
// timed as bench_scale times real nodes: from the first node_join until
// every node's barrier answer came back. Two topologies per size:
//   star     the coordinator answers every node (--tree-width 0)
//   tree64   --tree-width 64 with real relay daemons (swarm_relays.hpp):
//            (nodes-1)/64 musterd that listen, each a node of 8 real ranks
//            (31, 63 and 195 of them), hold the tree's inner positions; the
//            swarm's nodes, which do not listen, are its leaves and send
//            their key waits and barriers to the relay their World names
// Per row:
//   muster_s            wire-up time (the slowest node's barrier answer)
//   world_s             of that, until every swarm node had its world
//   coordinator_cpu_s   the coordinator's user + system CPU time in that span
//   coordinator_rss_mib its peak resident memory (VmHWM, a fresh daemon per run)
//   coordinator_msgs    peer requests it handled in that span
//   teardown_msgs       then the nodes' node_leave (until the coordinator settled)
//   teardown_s          until every swarm node's node_leave was answered
//                       (by its relay, in the tree)
//   slowest_node        the node whose barrier answer came last (0: a relay)
// No anchor runs beside these rows: torch 1.13's TCPStore cannot hold 100K
// clients here; doc/benchmarks.md runs no anchor for them. Joins go
// straight to the coordinator in both topologies (so its messages are
// O(nodes) there); in the tree, heartbeats, key waits, barriers and leaves
// go through the relays: O(width) at the coordinator.
//
//   bench_swarm MUSTERD [--runs R] [--width W] [--tree-only] [RANKS...]
//       (multiples of 8; default 16384 32768 100000, R = 3, W = 64)
// prints per row the median of each field over R runs:
//   bench scale_100k_tree64 muster_s=X ... nodes=N
// then a Markdown table.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "peer_daemons.hpp"
#include "swarm.hpp"
#include "swarm_relays.hpp"

using muster::bench::Daemon;

namespace {

constexpr uint32_t kRanksPerNode = 8;
constexpr uint32_t kNodesPerSlice = 2500;  // up to four descriptors each: under 20,000
constexpr uint32_t kTreeWidth = 64;

struct Result {
  double muster_s = 0, world_s = 0, cpu_s = 0, rss_mib = 0, teardown_s = 0;
  uint64_t msgs = 0, teardown_msgs = 0;
  uint32_t slowest = 0;
};

// user + system CPU seconds of a process (/proc/PID/stat fields 14, 15).
double cpu_seconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string s((std::istreambuf_iterator<char>(f)), {});
  std::istringstream rest(s.substr(s.rfind(')') + 2));
  std::string field;
  unsigned long long ut = 0, st = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) ut = std::stoull(field);
    if (i == 15) st = std::stoull(field);
  }
  return static_cast<double>(ut + st) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double peak_rss_mib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

struct Slice {
  pid_t pid = -1;
  int start = -1, ready = -1;  // our ends of the pipes
};

Slice fork_slice(const muster::bench::SwarmSlice& s) {
  int to_child[2], from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) throw std::runtime_error("pipe failed");
  Slice sl;
  sl.pid = fork();
  if (sl.pid == 0) {
    close(to_child[1]);
    close(from_child[0]);
    _exit(muster::bench::run_slice(s, to_child[0], from_child[1]));
  }
  if (sl.pid < 0) throw std::runtime_error("fork failed");
  close(to_child[0]);
  close(from_child[1]);
  sl.start = to_child[1];
  sl.ready = from_child[0];
  return sl;
}

void read_all(int fd, void* p, size_t n, const char* what) {
  auto* c = static_cast<char*>(p);
  while (n) {
    ssize_t got = read(fd, c, n);
    if (got <= 0) throw std::runtime_error(std::string("a swarm slice died before ") + what);
    c += got;
    n -= static_cast<size_t>(got);
  }
}

void tell_all(const std::vector<Slice>& slices) {
  char b = 'g';
  for (const auto& sl : slices)
    if (write(sl.start, &b, 1) != 1) throw std::runtime_error("a swarm slice is gone");
}

// Relay daemons a tree of `width` needs for `nodes` (the inner positions).
uint32_t relays_for(uint32_t nodes, uint32_t width) {
  return width == 0 || nodes <= width ? 0 : (nodes - 1) / width;
}

Result run_once(const std::string& musterd, const std::string& base, uint32_t ranks, uint32_t width,
                int run) {
  const uint32_t nodes = ranks / kRanksPerNode;
  const uint32_t relays = relays_for(nodes, width);
  const int port = muster::bench::free_port();
  const std::string job =
      "swarm-" + std::to_string(ranks) + "-w" + std::to_string(width) + "-" + std::to_string(run);
  // Fresh relay daemons each run (one that served the run before is still
  // ending that job, whose coordinator is gone), started before the slices
  // connect their thousands of nodes.
  std::vector<std::unique_ptr<Daemon>> relay_daemons;
  for (uint32_t i = 0; i < relays; ++i)
    relay_daemons.push_back(std::make_unique<Daemon>(
        musterd, base + "/" + job + "-relay" + std::to_string(i),
        std::vector<std::string>{"--peer-bind", "127.0.0.1", "--peer-port", "0"}, "120"));
  for (auto& d : relay_daemons) d->wait_ready();
  std::vector<std::string> relay_peers;  // host:port
  for (auto& d : relay_daemons) {
    std::string ep = d->peer_endpoint();
    relay_peers.push_back(ep.substr(ep.find("://") + 3));
  }
  // The slices fork before this process starts the relay nodes' threads.
  std::vector<Slice> slices;
  for (uint32_t first = relays; first < nodes; first += kNodesPerSlice) {
    muster::bench::SwarmSlice s{"tcp://127.0.0.1:" + std::to_string(port),
                                job,
                                first,
                                std::min(kNodesPerSlice, nodes - first),
                                nodes,
                                kRanksPerNode,
                                static_cast<int64_t>(getuid()),
                                relays > 0,
                                relay_peers,
                                width};
    slices.push_back(fork_slice(s));
  }
  Daemon coord(musterd, base + "/coord-" + job,
               {"--peer-bind", "127.0.0.1", "--peer-port", std::to_string(port), "--tree-width",
                std::to_string(width), "--max-connections-per-peer", "30000"},
               "120");
  coord.wait_ready();
  std::optional<muster::bench::RelayNodes> relay_nodes;
  if (relays)
    relay_nodes.emplace(relay_daemons, relays, job, "127.0.0.1:" + std::to_string(port), nodes,
                        kRanksPerNode);
  if (relay_nodes) relay_nodes->wait_ready();
  char b = 0;
  for (const auto& sl : slices) read_all(sl.ready, &b, 1, "it connected");
  const uint64_t before = muster::bench::settle(coord);
  const double cpu0 = cpu_seconds(coord.pid());
  const int64_t t0 = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
  if (relay_nodes) relay_nodes->start();
  tell_all(slices);
  Result res;
  int64_t world = t0, done = t0;
  std::string errors;
  for (const auto& sl : slices) {
    muster::bench::SwarmReport r;
    read_all(sl.ready, &r, sizeof r, "it reported");
    if (r.failures) errors += std::to_string(r.failures) + " failure(s), first: " + r.error + "\n";
    world = std::max(world, r.world_ns);
    if (r.done_ns > done) done = r.done_ns, res.slowest = r.slowest;
  }
  if (relay_nodes) {
    const int64_t relays_done = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                    relay_nodes->wait_done().time_since_epoch())
                                    .count();
    if (relays_done > done) done = relays_done, res.slowest = 0;
    if (relay_nodes->failures())
      errors += std::to_string(relay_nodes->failures()) +
                " relay failure(s), first: " + relay_nodes->first_error() + "\n";
  }
  res.cpu_s = cpu_seconds(coord.pid()) - cpu0;
  const uint64_t after = muster::bench::peer_requests(coord);
  if (relay_nodes) relay_nodes->leave();
  const auto leave0 = std::chrono::steady_clock::now();
  tell_all(slices);
  int bad = 0;
  for (const auto& sl : slices) {
    int status = 0;
    waitpid(sl.pid, &status, 0);
    bad += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(sl.start);
    close(sl.ready);
  }
  res.teardown_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - leave0).count();
  if (!errors.empty() || bad)
    throw std::runtime_error(job + ": " + errors + std::to_string(bad) + " slice(s) failed");
  res.teardown_msgs = muster::bench::settle(coord) - after;
  res.rss_mib = peak_rss_mib(coord.pid());
  res.muster_s = static_cast<double>(done - t0) / 1e9;
  res.world_s = static_cast<double>(world - t0) / 1e9;
  res.msgs = after - before;
  return res;
}

std::string row_name(uint32_t ranks, uint32_t width) {
  std::string k = ranks % 1000 == 0 ? std::to_string(ranks / 1000) : std::to_string(ranks / 1024);
  return "scale_" + k + "k_" + (width ? "tree" + std::to_string(width) : "star");
}

template <class F>
double median(std::vector<Result> rs, F f) {
  std::vector<double> v;
  for (const auto& r : rs) v.push_back(static_cast<double>(f(r)));
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  uint32_t ranks = 0, width = 0;
  std::vector<Result> rs;
};

void print_row(const Row& row) {
  const auto& rs = row.rs;
  std::printf(
      "bench %s muster_s=%.3f world_s=%.3f coordinator_cpu_s=%.3f coordinator_rss_mib=%.1f "
      "coordinator_msgs=%.0f teardown_msgs=%.0f teardown_s=%.3f slowest_node=%.0f relays=%u "
      "nodes=%u ranks=%u\n",
      row_name(row.ranks, row.width).c_str(), median(rs, [](auto& r) { return r.muster_s; }),
      median(rs, [](auto& r) { return r.world_s; }), median(rs, [](auto& r) { return r.cpu_s; }),
      median(rs, [](auto& r) { return r.rss_mib; }), median(rs, [](auto& r) { return r.msgs; }),
      median(rs, [](auto& r) { return r.teardown_msgs; }),
      median(rs, [](auto& r) { return r.teardown_s; }),
      median(rs, [](auto& r) { return r.slowest; }),
      relays_for(row.ranks / kRanksPerNode, row.width), row.ranks / kRanksPerNode, row.ranks);
  std::fflush(stdout);
}

void print_table(const std::vector<Row>& rows) {
  std::printf(
      "\n| ranks (nodes x 8) | topology | wire-up s (range) | world s | coordinator CPU s | "
      "coordinator peak RSS MiB | coordinator msgs |\n|---|---|---|---|---|---|---|\n");
  for (const auto& row : rows) {
    const auto& rs = row.rs;
    auto [lo, hi] = std::minmax_element(rs.begin(), rs.end(),
                                        [](auto& a, auto& b) { return a.muster_s < b.muster_s; });
    std::string topo = row.width
                           ? "tree of " + std::to_string(row.width) + " (" +
                                 std::to_string(relays_for(row.ranks / kRanksPerNode, row.width)) +
                                 " relay daemons)"
                           : "star";
    std::printf(
        "| %u (%u) | %s | %.3f (%.3f-%.3f) | %.3f | %.3f | %.1f | %.0f |\n", row.ranks,
        row.ranks / kRanksPerNode, topo.c_str(), median(rs, [](auto& r) { return r.muster_s; }),
        lo->muster_s, hi->muster_s, median(rs, [](auto& r) { return r.world_s; }),
        median(rs, [](auto& r) { return r.cpu_s; }), median(rs, [](auto& r) { return r.rss_mib; }),
        median(rs, [](auto& r) { return r.msgs; }));
  }
}

int run(int argc, char** argv) {
  std::string musterd = argv[1];
  int runs = 3;
  uint32_t width = kTreeWidth;
  bool star = true;
  std::vector<uint32_t> sizes;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--runs" && i + 1 < argc)
      runs = std::max(1, std::atoi(argv[++i]));
    else if (a == "--width" && i + 1 < argc)
      width = static_cast<uint32_t>(std::atoi(argv[++i]));
    else if (a == "--tree-only")
      star = false;
    else
      sizes.push_back(static_cast<uint32_t>(std::atoi(argv[i])));
  }
  if (sizes.empty()) sizes = {16384, 32768, 100000};
  for (auto n : sizes) {
    if (n == 0 || n % kRanksPerNode != 0)
      throw std::runtime_error("sizes must be multiples of " + std::to_string(kRanksPerNode));
  }
  muster::bench::raise_fd_limit();
  signal(SIGPIPE, SIG_IGN);
  const std::string base = muster::bench::runtime_base("muster-swarm");
  struct Cleanup {
    std::string dir;
    ~Cleanup() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } cleanup{base};
  std::vector<Row> rows;
  for (uint32_t n : sizes)
    for (uint32_t w : {0u, width}) {
      if (w == 0 && !star) continue;
      Row row{n, w, {}};
      for (int r = 0; r < runs; ++r) {
        row.rs.push_back(run_once(musterd, base, n, w, r));
        std::fprintf(stderr, "bench_swarm: %s run %d: %.3f s\n", row_name(n, w).c_str(), r,
                     row.rs.back().muster_s);
      }
      print_row(row);
      rows.push_back(std::move(row));
    }
  print_table(rows);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: bench_swarm MUSTERD [--runs R] [--width W] [--tree-only] [RANKS...]\n");
    return 2;
  }
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_swarm: %s\n", e.what());
    return 1;
  }
}
