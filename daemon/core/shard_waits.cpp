#include "core/shard_waits.hpp"

#include <algorithm>
#include <utility>

namespace muster::daemon {

void ShardWaits::park(const Key& key, Parked p) {
  for (auto& [ticket, c] : computations_)
    if (c.key == key) {
      c.waiting.push_back(std::move(p));
      return;
    }
  const uint64_t ticket = next_ticket_++;
  computations_[ticket] = {key, {}};
  computations_[ticket].waiting.push_back(std::move(p));
  queue_.push_back(ticket);
}

std::optional<ShardWaits::Next> ShardWaits::next() {
  while (running_ == 0 && !queue_.empty()) {
    const uint64_t ticket = queue_.front();
    queue_.pop_front();
    auto it = computations_.find(ticket);
    if (it == computations_.end()) continue;  // its job ended
    if (it->second.waiting.empty()) {         // its clients stopped reading
      computations_.erase(it);
      continue;
    }
    running_ = ticket;
    running_n_ = it->second.key.n;
    return Next{ticket, it->second.key};
  }
  return std::nullopt;
}

ShardWaits::Finished ShardWaits::finish(uint64_t ticket) {
  Finished f;
  if (ticket != running_ || running_ == 0) return f;
  f.n = running_n_;
  running_ = 0;
  running_n_ = 0;
  auto it = computations_.find(ticket);
  if (it == computations_.end()) return f;
  f.known = true;
  f.key = std::move(it->second.key);
  f.waiting = std::move(it->second.waiting);
  computations_.erase(it);
  return f;
}

std::vector<ShardWaits::Parked> ShardWaits::drop_job(const std::string& job) {
  std::vector<Parked> gone;
  std::erase_if(computations_, [&](auto& kv) {
    if (kv.second.key.job != job) return false;
    for (auto& p : kv.second.waiting) gone.push_back(std::move(p));
    return true;
  });
  return gone;
}

std::vector<ShardWaits::Parked> ShardWaits::drop_all() {
  std::vector<Parked> gone;
  for (auto& [ticket, c] : computations_)
    for (auto& p : c.waiting) gone.push_back(std::move(p));
  computations_.clear();
  queue_.clear();
  return gone;
}

std::vector<uint64_t> ShardWaits::forget_client(const std::string& routing_id) {
  std::vector<uint64_t> ids;
  for (auto& [ticket, c] : computations_)
    std::erase_if(c.waiting, [&](const Parked& p) {
      if (p.to.from_peer || p.to.routing_id != routing_id) return false;
      ids.push_back(p.to.request_id);
      return true;
    });
  return ids;
}

}  // namespace muster::daemon
