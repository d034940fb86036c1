// The daemon's Permuter (core/permuter.hpp): one worker thread that
// computes sampler permutations, and an eventfd that it signals when one is
// done, polled by the event loop, which then collects it
// (Samplers::permutations_done). The thread touches nothing but its own queue
// and the arrays it fills.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "core/permuter.hpp"

namespace muster::daemon {

class PermuteThread final : public Permuter {
 public:
  // Throws Error when there is no eventfd to be had.
  PermuteThread();
  // Stops a computation under way within a few hundred steps (a 2^28
  // shuffle takes seconds) and joins the thread; nothing is left allocated.
  ~PermuteThread() override;
  PermuteThread(const PermuteThread&) = delete;
  PermuteThread& operator=(const PermuteThread&) = delete;

  void start(uint64_t ticket, uint64_t n, uint64_t seed) override;
  std::vector<Done> take() override;
  // Readable once a computation is done, until take().
  int fd() const { return fd_; }

 private:
  struct Task {
    uint64_t ticket, n, seed;
  };
  void run();

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<Task> tasks_;  // guarded by mu_
  std::vector<Done> done_;  // guarded by mu_
  std::atomic<bool> stop_{false};
  int fd_ = -1;
  std::thread thread_;  // last: it starts once the rest exists
};

}  // namespace muster::daemon
