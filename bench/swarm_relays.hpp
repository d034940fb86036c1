// The real relays of bench_swarm's tree rows: node daemons (musterd) that
// listen for children, each running a node of 8 ranks as bench_scale's
// nodes do (a launcher thread: reserve, rendezvous with a fixed node rank;
// then 8 rank threads: join, the NCCL unique id, a barrier). They take node
// ranks 0..R-1, so the coordinator puts them at the tree's inner positions
// and the swarm's nodes, which do not listen, below them as leaves.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "peer_daemons.hpp"

namespace muster::bench {

// One run's relay nodes: threads start at construction and wait at `go`.
class RelayNodes {
 public:
  RelayNodes(const std::vector<std::unique_ptr<Daemon>>& daemons, uint32_t count,
             const std::string& job, const std::string& coordinator, uint32_t nodes,
             uint32_t ranks_per_node);
  ~RelayNodes();
  void wait_ready() const;
  void start() { go_.release(); }
  // Blocks until every rank passed the barrier; the time the last one did.
  std::chrono::steady_clock::time_point wait_done();
  // The ranks leave (their daemons tell the coordinator).
  void leave();
  uint32_t failures() const { return failures_; }
  const std::string& first_error() const { return first_error_; }

 private:
  void launcher(uint32_t n);
  void rank(uint32_t r);
  void fail(const std::string& what);

  const std::vector<std::unique_ptr<Daemon>>& daemons_;
  const uint32_t count_, nodes_, per_node_;
  const std::string job_, coordinator_;
  Gate go_, leave_;
  std::unique_ptr<Gate[]> has_world_;  // by relay node
  std::atomic<uint32_t> ready_{0}, formed_{0}, done_{0}, failures_{0};
  std::mutex m_;
  std::string first_error_;
  std::vector<std::chrono::steady_clock::time_point> done_at_;
  std::vector<std::thread> threads_;
};

}  // namespace muster::bench
