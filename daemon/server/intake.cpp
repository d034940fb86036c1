// The requests the server takes in: framing, the sender's credentials, the
// reply cache, then the state.
#include <string>
#include <vector>

#include "event/boundary.hpp"
#include "log.hpp"
#include "protocol/limits.hpp"
#include "protocol/message_table.hpp"
#include "server/runtime.hpp"

namespace muster::daemon {

namespace {

Outgoing error_out(const ReplyTo& to, uint64_t request_id, ErrorCode code, const std::string& why) {
  return {to, proto::encode_error(request_id, code, why), {}, static_cast<uint16_t>(code)};
}

}  // namespace

void Server::Runtime::receive(zmq::socket_t& sock, bool from_peer) {
  // A disconnect reported first keeps a new connection on a reused fd from
  // inheriting the old one's token.
  if (!from_peer) conns.drain();
  // Replies are held until the round ends (saved first: durable.cpp), so a
  // round that made this many bytes of them ends early: a client pipelining
  // large gets costs at most this (plus one reply) before the replies meet
  // its queue's bound (--reply-queue), not its whole pipeline.
  constexpr size_t kRoundReplyBytes = 64u << 20;
  size_t made = 0;
  for (int n = 0; n < 1024 && made < kRoundReplyBytes; ++n) {
    std::vector<zmq::message_t> frames;
    zmq::message_t part;
    if (!sock.recv(part, zmq::recv_flags::dontwait)) break;
    frames.push_back(std::move(part));
    while (frames.back().more()) {
      zmq::message_t next;
      (void)sock.recv(next);
      frames.push_back(std::move(next));
    }
    size_t before = out.size();
    take(frames, from_peer);
    for (size_t i = before; i < out.size(); ++i) made += out[i].frame.size() + out[i].body.size();
  }
}

void Server::Runtime::take(std::vector<zmq::message_t>& frames, bool from_peer) {
  ReplyTo to;
  to.routing_id = frames[0].to_string();
  to.from_peer = from_peer;
  if (!from_peer) {
    to.conn = conns.token_of(frames.back());
    // No longer one of the silent connections conn_caps.hpp bounds.
    int fd = zmq_msg_get(const_cast<zmq_msg_t*>(frames.back().handle()), ZMQ_SRCFD);
    if (fd >= 0) caps->local_spoke(fd);
  }
  const zmq::message_t* body = nullptr;
  if (frames.size() == 2) {
    body = &frames[1];
  } else if (frames.size() == 3 && frames[1].size() == 0 && !from_peer) {
    to.delimiter = true;
    body = &frames[2];
  }
  if (!body) {
    out.push_back(
        error_out(to, 0, ErrorCode::kBadMessage,
                  "expected one frame per request, got " + std::to_string(frames.size() - 1)));
    return;
  }
  try {
    // Binary fields point into the frame, which outlives the handling.
    auto env = proto::decode_envelope(body->data(), body->size(), true);
    to.request_id = env.request_id;
    // Counted when the request is done with, however it ends.
    struct Timed {
      Observer& o;
      uint16_t type;
      Clock::time_point t0 = o.counting() ? Clock::now() : Clock::time_point{};
      ~Timed() {
        if (o.counting()) o.request(type, Clock::now() - t0);
      }
    } timed{observe, env.type};
    if (from_peer) {
      note_peer(*body, env.type);
      // The CURVE key the ZAP handler admitted this link with (its user id;
      // none under peer-plain): the reply cache binds the link's replies to it.
      if (const char* key = zmq_msg_gets(const_cast<zmq_msg_t*>(body->handle()), "User-Id"))
        to.peer_key = key;
    }
    // Every local request is checked against its sender's uid (access.cpp),
    // the reply cache's answers included; a sender the daemon cannot
    // identify is refused, never trusted. Peers are daemons, authenticated
    // by CURVE instead.
    if (!from_peer && !peer_credentials(*body, to.peer_uid, to.peer_pid)) {
      out.push_back(error_out(to, env.request_id, ErrorCode::kPermissionDenied,
                              "musterd cannot tell which user sent this "
                              "request: the connection carries no peer "
                              "credentials (only ipc:// clients are served)"));
      return;
    }
    // A peer's requests are tracked under the inner type of a Forward; its
    // heartbeats and broadcast chunks are not (peer_cache_type).
    uint16_t cached = from_peer ? peer_cache_type(env) : env.type;
    if (cached && answered(to, *body, cached)) return;
    state->handle(to, env, out);
  } catch (const proto::EnvelopeError& e) {
    log::debug(std::string("refused a frame: ") + e.what());
    out.push_back(error_out(to, e.request_id, e.code(), e.what()));
  } catch (...) {
    // The boundary (event/boundary.hpp) of every request: whatever its
    // handling threw (ZeroMQ, an allocation, a decoder) fails this request
    // alone, with a reply; the loop serves on.
    auto e = std::current_exception();
    event::contained_failure("a request", e);
    try {
      out.push_back(
          error_out(to, to.request_id, ErrorCode::kInternal,
                    "musterd could not serve this request: " + event::describe_exception(e)));
    } catch (...) {
    }
  }
}

// What the reply cache tracks a peer daemon's request as (0: not at all).
// A node daemon sends its requests in flight again when its link to a
// restarted coordinator reconnects (cluster/node.cpp): a copy of one still
// parked is dropped, one already answered gets the saved answer. Heartbeats
// and job_waits are reads, asked anew anyway; a broadcast's chunks are
// not kept (MiBs each): the node fails those with `restarted` instead of
// sending them again, and the ranks start the broadcast again.
uint16_t Server::Runtime::peer_cache_type(const proto::Envelope& env) {
  const proto::MessageTraits* t = proto::message_traits(env.type);
  if (t && t->kept == proto::Kept::kNo) return 0;  // the table's reads: heartbeat, job_waits
  if (env.type != static_cast<uint16_t>(proto::MsgType::kForward)) return env.type;
  try {
    codec::MapReader r(env.payload, "forward");
    auto frame = r.bin_view("frame", limits::kMaxFrameBytes);
    auto inner = proto::decode_envelope(frame.data(), frame.size(), true);
    const proto::MessageTraits* it = proto::message_traits(inner.type);
    if (!it || it->area == proto::Area::kBcast) return 0;
    return inner.type;
  } catch (const std::exception&) {
    return env.type;  // the handler says what is wrong with it
  }
}

// A plain TCP connection is a peer's once it sent a daemon-to-daemon
// request that decodes (a node_join, or the heartbeat of a node whose link
// reconnected); until then the sweep of conn_caps.hpp may close it. Plain
// TCP authenticates nobody (peer_plain is for trusted networks): this only
// bounds how long a connection that speaks no protocol holds its fd.
void Server::Runtime::note_peer(const zmq::message_t& body, uint16_t type) {
  const proto::MessageTraits* t = proto::message_traits(type);
  if (!t || t->sender != proto::Sender::kPeer) return;
  int fd = zmq_msg_get(const_cast<zmq_msg_t*>(body.handle()), ZMQ_SRCFD);
  if (fd >= 0) caps->peer_authenticated(fd);
}

bool Server::Runtime::answered(ReplyTo& to, const zmq::message_t& body, uint16_t type) {
  uint64_t hash = ReplyCache::hash({static_cast<const char*>(body.data()), body.size()});
  // A request sent again (same client, same id): answered once.
  std::string again;
  switch (replies.check(to, hash, &again)) {
    case ReplyCache::Seen::kAnswered:
      out.push_back({to, std::move(again)});
      return true;
    case ReplyCache::Seen::kPending:
      return true;  // still waiting: its one reply comes when the wait ends
    case ReplyCache::Seen::kForeign:
      log::warning("refused a request from uid " + std::to_string(to.peer_uid) + " (pid " +
                   std::to_string(to.peer_pid) + ") under another uid's routing id");
      out.push_back(error_out(to, to.request_id, ErrorCode::kPermissionDenied,
                              "this connection's routing id belongs to another "
                              "user's client; choose another (libmuster picks a "
                              "random one)"));
      return true;
    case ReplyCache::Seen::kNew:
      break;
  }
  // A change is refused before it is made when the disk has no room to
  // save it: nothing to roll back, and nobody (a waiter on the key
  // included) sees a value that a restart would not know.
  std::string why;
  const proto::MessageTraits* traits = proto::message_traits(type);
  bool job_change = traits && traits->area == proto::Area::kJobs;
  bool peer = traits && traits->area == proto::Area::kPeer;
  if (ReplyCache::mutating(type) && !state_file->reserve(body.size(), job_change, peer, &why)) {
    observe.storage_refused(why);
    out.push_back(error_out(to, to.request_id, ErrorCode::kStorageFailed, why));
    return true;
  }
  // A change is saved before the round's replies, whether or not the
  // reply cache tracks its client: one whose routing id it does not keep
  // (ZeroMQ's own, a REQ socket) was told of a join that a daemon killed
  // before the next save had never heard of.
  if (ReplyCache::mutating(type)) {
    observe.storage_room();
    dirty = true;
  }
  replies.begin(to, type, hash);
  return false;
}

}  // namespace muster::daemon
