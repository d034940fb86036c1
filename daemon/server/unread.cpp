// Local clients that stop reading their replies. ZeroMQ gives no way to
// empty one connection's queue, so what the daemon can free is freed: once
// a connection's queue is full (--reply-queue) its replies are dropped, and
// so are the gets and waits parked for it (the keys they name can be
// large, and their replies would be dropped too). Once the connection takes
// a frame again, it gets one error with request id 0, replies_dropped, and
// libmuster sends every request it still awaits again: the replies come
// from the reply cache or from doing the read again, the waits park anew.
// A notice rather than a closed connection: the client keeps its place
// (its routing id, its parked barrier arrivals), and needs no reconnect.
#include <sys/socket.h>

#include <algorithm>

#include "log.hpp"
#include "protocol/envelope.hpp"
#include "server/frames.hpp"
#include "server/runtime.hpp"

namespace muster::daemon {

void Server::Runtime::drop_unread(uint64_t conn, const std::string& routing_id) {
  unread.emplace(conn, routing_id);
  pinned->full(conn);
  // Every round it overflows: a client that sends and never reads parks
  // new waits.
  auto ids = state->forget_client_waits(routing_id);
  for (uint64_t id : ids) replies.forget_pending(routing_id, id);
  waits_dropped += ids.size();
}

void Server::Runtime::notify_unread() {
  for (auto it = unread.begin(); it != unread.end();) {
    if (it->first != 0 && !conns.live(it->first)) {
      it = unread.erase(it);  // gone: a client that reconnects resends by itself
      continue;
    }
    Outgoing o;
    o.to.routing_id = it->second;
    o.frame = proto::encode_error(0, ErrorCode::kRepliesDropped,
                                  "musterd dropped replies to this connection: it read none "
                                  "while its queue was full (--reply-queue); send the requests "
                                  "still awaited again");
    if (send_reply(router, o) == SendResult::kFull) {
      ++it;
      continue;
    }
    pinned->read_again(it->first);  // its queue took a frame: it reads
    it = unread.erase(it);
  }
}

void Server::Runtime::bound_pinned() {
  const Quotas& q = state->quotas();
  if (!pinned->any() || q.memory == 0) return;
  const Holdings all = state->holdings(-2);  // no one's: the totals alone
  auto held_by = [&](int64_t uid) { return state->holdings(uid).memory_mine; };
  auto share = [&](int64_t uid) -> uint64_t {
    return uid == 0 ? 0 : q.memory / std::max<uint64_t>(2, state->holdings(uid).active);
  };
  for (uint64_t conn : pinned->over(q.memory, all.memory_total, held_by, share)) {
    const int fd = conns.fd_of(conn);
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    if (Clock::now() - pinned_logged > std::chrono::seconds(10)) {
      pinned_logged = Clock::now();
      log::notice(
          "shut a local connection that read none of the replies it asked for: they "
          "took its user or the daemon over the memory ceiling (--max-memory)");
    }
  }
}

}  // namespace muster::daemon
