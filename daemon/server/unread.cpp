#include "server/unread.hpp"

#include <sys/socket.h>

#include <algorithm>

#include "log.hpp"
#include "protocol/envelope.hpp"
#include "server/frames.hpp"

namespace muster::daemon {

void UnreadClients::overflowed(uint64_t conn, const std::string& routing_id, State& state,
                               ReplyCache& replies) {
  unread_.emplace(conn, routing_id);
  pinned_.full(conn);
  // Every round it overflows: a client that sends and never reads parks
  // new waits.
  auto ids = state.forget_client_waits(routing_id);
  for (uint64_t id : ids) replies.forget_pending(routing_id, id);
  waits_dropped_ += ids.size();
}

void UnreadClients::after_delivery(zmq::socket_t& router, const ClientConnections& conns,
                                   const State& state, size_t overflowing) {
  notify(router, conns);
  bound(conns, state);
  // A client that stopped reading overflows every round: said once in 10 s.
  if (overflowing == 0 || Clock::now() - drop_logged_ <= std::chrono::seconds(10)) return;
  drop_logged_ = Clock::now();
  log::info(std::to_string(overflowing) +
            " local client(s) read no replies: their queue is full (--reply-queue), "
            "replies dropped (" +
            std::to_string(replies_dropped_) +
            " so far) with the gets and waits parked for them (" + std::to_string(waits_dropped_) +
            "); they send their requests again");
}

void UnreadClients::notify(zmq::socket_t& router, const ClientConnections& conns) {
  for (auto it = unread_.begin(); it != unread_.end();) {
    if (it->first != 0 && !conns.live(it->first)) {
      it = unread_.erase(it);  // gone: a client that reconnects resends by itself
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
    pinned_.read_again(it->first);  // its queue took a frame: it reads
    it = unread_.erase(it);
  }
}

void UnreadClients::bound(const ClientConnections& conns, const State& state) {
  const Quotas& q = state.quotas();
  if (!pinned_.any() || q.memory == 0) return;
  const Holdings all = state.holdings().of(-2);  // no one's: the totals alone
  auto held_by = [&](int64_t uid) { return state.holdings().of(uid).memory_mine; };
  auto share = [&](int64_t uid) -> uint64_t {
    return uid == 0 ? 0 : q.memory / std::max<uint64_t>(2, state.holdings().of(uid).active);
  };
  for (uint64_t conn : pinned_.over(q.memory, all.memory_total, held_by, share)) {
    const int fd = conns.fd_of(conn);
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    if (Clock::now() - pinned_logged_ > std::chrono::seconds(10)) {
      pinned_logged_ = Clock::now();
      log::notice(
          "shut a local connection that read none of the replies it asked for: they "
          "took its user or the daemon over the memory ceiling (--max-memory)");
    }
  }
}

}  // namespace muster::daemon
