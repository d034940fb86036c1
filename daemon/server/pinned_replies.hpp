// The memory that replies queued for local clients that do not read them
// pin, counted against the memory ceiling (core/ceilings.hpp). ZeroMQ
// keeps up to --reply-queue replies (and one more in flight) for each
// connection and tells nobody how many bytes that is; the daemon knows the
// sizes of the last replies it sent each connection, and once a
// connection's queue is full (it read none of them) those are what it
// pins, until it reads again or ends. Six connections that never read once
// pinned ~120 MiB of status replies each.
//
// Over the ceiling, or a uid over its share of it (what its stores and
// parked requests hold, plus what its unread connections pin), the unread
// connections that pin the most are shut (shutdown(2) of their fd):
// libzmq then drops their queues, which frees the memory; a libmuster
// client connects again and sends its requests anew. Memory already taken
// cannot be refused the way a request is; shutting the connection that
// holds it is what gives it back.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <vector>

namespace muster::daemon {

class PinnedReplies {
 public:
  // depth: the replies a connection's queue holds at most (--reply-queue
  // + 1).
  explicit PinnedReplies(size_t depth) : depth_(depth) {}

  // A reply of `bytes` went to connection conn, of uid.
  void sent(uint64_t conn, int64_t uid, uint64_t bytes);
  // conn's queue is full: its last replies are pinned.
  void full(uint64_t conn);
  // conn read again (its queue took a frame), or ended.
  void read_again(uint64_t conn);
  void ended(uint64_t conn) { conns_.erase(conn); }

  bool any() const { return total_ != 0; }

  // The unread connections to shut, most pinned first, so that the total
  // stays within `ceiling` with `held` for everyone else, and no uid's
  // pinned bytes plus `held_by(uid)` pass `share(uid)` (0: no share).
  std::vector<uint64_t> over(uint64_t ceiling, uint64_t held,
                             const std::function<uint64_t(int64_t uid)>& held_by,
                             const std::function<uint64_t(int64_t uid)>& share);

 private:
  struct Conn {
    int64_t uid = -1;
    std::deque<uint64_t> last;  // the sizes of its last `depth_` replies
    uint64_t sum = 0;
    bool full = false;
  };
  size_t depth_;
  std::unordered_map<uint64_t, Conn> conns_;
  std::unordered_map<int64_t, uint64_t> by_uid_;  // pinned, of full connections
  uint64_t total_ = 0;
};

}  // namespace muster::daemon
