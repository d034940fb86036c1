// The real relay nodes of bench_swarm's tree rows (swarm_relays.hpp).
#include "swarm_relays.hpp"

#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "muster/broadcast.hpp"
#include "muster/launcher.hpp"

namespace muster::bench {

using std::chrono::milliseconds;
using std::chrono::seconds;

RelayNodes::RelayNodes(const std::vector<std::unique_ptr<Daemon>>& daemons, uint32_t count,
                       const std::string& job, const std::string& coordinator, uint32_t nodes,
                       uint32_t ranks_per_node)
    : daemons_(daemons),
      count_(count),
      nodes_(nodes),
      per_node_(ranks_per_node),
      job_(job),
      coordinator_(coordinator),
      has_world_(new Gate[count]),
      done_at_(count * ranks_per_node) {
  if (count > daemons.size()) throw std::runtime_error("not enough relay daemons");
  threads_.reserve(count * (1 + ranks_per_node));
  for (uint32_t n = 0; n < count; ++n) threads_.emplace_back([this, n] { launcher(n); });
  for (uint32_t r = 0; r < count * ranks_per_node; ++r)
    threads_.emplace_back([this, r] { rank(r); });
}

RelayNodes::~RelayNodes() {
  go_.release();
  leave_.release();
  for (uint32_t n = 0; n < count_; ++n) has_world_[n].release();  // let waiting ranks go
  for (auto& t : threads_) t.join();
}

void RelayNodes::fail(const std::string& what) {
  std::lock_guard lk(m_);
  if (!failures_++) first_error_ = what;
}

void RelayNodes::wait_ready() const {
  while (ready_ < count_ * (1 + per_node_)) std::this_thread::sleep_for(milliseconds(2));
}

// What `muster run` does on a node: reserve its ranks, then rendezvous
// with a fixed node rank (the relays are node ranks 0..R-1).
void RelayNodes::launcher(uint32_t n) {
  try {
    Client c({daemons_[n]->endpoint(), seconds(120)});
    ++ready_;
    go_.wait();
    reserve(c, job_, per_node_, false, {}, getpid(), 0);
    RendezvousOptions o;
    o.coordinator = coordinator_;
    o.node_rank = static_cast<int>(n);
    o.min_nodes = o.max_nodes = nodes_;
    o.timeout = seconds(120);
    o.master_addr = "127.0.0.1";
    auto w = rendezvous(c, job_, o);
    if (w.node_rank != n || w.rank_offset != n * per_node_)
      throw std::runtime_error("relay node " + std::to_string(n) + " got node rank " +
                               std::to_string(w.node_rank));
  } catch (const std::exception& e) {
    fail(std::string("relay node: ") + e.what());
  }
  has_world_[n].release();
}

void RelayNodes::rank(uint32_t r) {
  const uint32_t node = r / per_node_, local = r % per_node_;
  try {
    Client c({daemons_[node]->endpoint(), seconds(120)});
    ++ready_;
    go_.wait();
    // A node's workers start once its own world came.
    has_world_[node].wait();
    JoinOptions jo;
    jo.job = job_;
    jo.local_world_size = per_node_;
    jo.wants_gpu = false;
    jo.local_rank = static_cast<int>(local);
    auto info = c.join(jo);
    if (info.rank != r) throw std::runtime_error("joined as rank " + std::to_string(info.rank));
    auto id = nccl_unique_id(c, "world", seconds(120));
    if (id.size() != 128) throw std::runtime_error("an NCCL id of " + std::to_string(id.size()));
    c.barrier("wired", seconds(120));
    done_at_[r] = std::chrono::steady_clock::now();
    ++done_;
    leave_.wait();
    c.leave();
  } catch (const std::exception& e) {
    fail("relay rank " + std::to_string(r) + ": " + e.what());
    done_at_[r] = std::chrono::steady_clock::now();
    ++done_;
  }
}

std::chrono::steady_clock::time_point RelayNodes::wait_done() {
  while (done_ < count_ * per_node_) std::this_thread::sleep_for(std::chrono::microseconds(200));
  return *std::max_element(done_at_.begin(), done_at_.end());
}

void RelayNodes::leave() {
  leave_.release();
}

}  // namespace muster::bench
