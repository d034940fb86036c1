#include "server/pinned_replies.hpp"

#include <algorithm>

namespace muster::daemon {

void PinnedReplies::sent(uint64_t conn, int64_t uid, uint64_t bytes) {
  Conn& c = conns_[conn];
  c.uid = uid;
  c.last.push_back(bytes);
  c.sum += bytes;
  if (c.full) by_uid_[uid] += bytes, total_ += bytes;
  while (c.last.size() > depth_) {
    if (c.full) by_uid_[uid] -= c.last.front(), total_ -= c.last.front();
    c.sum -= c.last.front();
    c.last.pop_front();
  }
}

void PinnedReplies::full(uint64_t conn) {
  auto it = conns_.find(conn);
  if (it == conns_.end() || it->second.full) return;
  it->second.full = true;
  by_uid_[it->second.uid] += it->second.sum;
  total_ += it->second.sum;
}

void PinnedReplies::read_again(uint64_t conn) {
  auto it = conns_.find(conn);
  if (it == conns_.end()) return;
  if (it->second.full) {
    auto u = by_uid_.find(it->second.uid);
    u->second -= it->second.sum;
    if (u->second == 0) by_uid_.erase(u);
    total_ -= it->second.sum;
  }
  conns_.erase(it);
}

std::vector<uint64_t> PinnedReplies::over(uint64_t ceiling, uint64_t held,
                                          const std::function<uint64_t(int64_t)>& held_by,
                                          const std::function<uint64_t(int64_t)>& share) {
  std::vector<std::pair<uint64_t, uint64_t>> unread;  // (sum, conn), most first
  for (const auto& [conn, c] : conns_)
    if (c.full) unread.emplace_back(c.sum, conn);
  std::sort(unread.rbegin(), unread.rend());
  std::unordered_map<int64_t, uint64_t> left = by_uid_;
  uint64_t total = total_;
  std::vector<uint64_t> shut;
  for (const auto& [sum, conn] : unread) {
    const int64_t uid = conns_.at(conn).uid;
    const uint64_t s = share(uid);
    const bool over_share = s != 0 && left[uid] + held_by(uid) > s;
    const bool over_all = ceiling != 0 && total + held > ceiling;
    if (!over_share && !over_all) continue;
    shut.push_back(conn);
    left[uid] -= sum;
    total -= sum;
  }
  for (uint64_t conn : shut) read_again(conn);  // no longer counted: it ends
  return shut;
}

}  // namespace muster::daemon
