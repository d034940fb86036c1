#include "connection.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>

#include "endpoint.hpp"
#include "protocol/limits.hpp"
#include "protocol/messages.hpp"
#include "trust.hpp"

namespace muster::detail {

zmq::context_t& client_context() {
  // Never destroyed: terminating a context blocks until every socket is
  // closed, and a program that never frees its client (ctypes, a static
  // Client) must still be able to exit.
  //
  // One per process, not per program: a child forked after the parent made
  // its context has none of the context's I/O threads, so its clients would
  // never get a reply. The child makes a context of its own (the parent's
  // copy is left alone; a Client made before the fork does not work in the
  // child, as with any ZeroMQ socket).
  static std::mutex m;
  static zmq::context_t* ctx = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(m);
  if (!ctx || owner != ::getpid()) {
    ctx = new zmq::context_t(1);
    // Each Client holds a socket and its monitor's pair (three sockets with
    // the monitor's own end); libzmq's default cap of 1023 sockets would stop
    // a process at ~340 clients (threads as ranks, the load test).
    ctx->set(zmq::ctxopt::max_sockets, 65535);
    owner = ::getpid();
  }
  return *ctx;
}

Connection::Connection(std::string endpoint, std::chrono::milliseconds request_timeout,
                       std::chrono::milliseconds patience)
    : endpoint_(std::move(endpoint)), request_timeout_(request_timeout), patience_(patience) {
  connect();
}

// The monitor stops before its sockets close: sock_ must not report events
// to a closed peer.
Connection::~Connection() {
  if (monitoring_) zmq_socket_monitor(sock_.handle(), nullptr, 0);
}

void Connection::connect() {
  target_ = endpoint_;
  // Another user's daemon must not get our requests (issue #13). Only an
  // endpoint the user named in MUSTER_ENDPOINT may lie in a directory of
  // someone else (shared on purpose); its daemon is checked all the same.
  if (endpoint_.rfind("ipc://", 0) == 0) {
    ipc_ = true;
    std::string path = endpoint_.substr(6);
    const char* named = std::getenv("MUSTER_ENDPOINT");
    if (path[0] != '@' && endpoint_ != (named ? named : ""))
      trust::check_socket_dir(ipc_dir_of(endpoint_));
    // The user's own socket, where the daemon made one: its backlog is not
    // the one another user's connect flood fills.
    target_ = personal_endpoint(endpoint_);
    trust::check_daemon(target_.substr(6));
  }
  sock_.set(zmq::sockopt::linger, 0);
  // A connect the daemon's full backlog refused (hundreds of ranks starting
  // at once) is tried again after 10 ms, backing off to 200 ms while it
  // keeps failing, not after libzmq's fixed 100 ms.
  sock_.set(zmq::sockopt::reconnect_ivl, 10);
  sock_.set(zmq::sockopt::reconnect_ivl_max, 200);
  // The daemon knows a resent request by this id: random, kept across
  // reconnects; ZeroMQ reserves ids that start with a zero byte.
  std::random_device rd;
  std::string id = "m";
  while (id.size() < 16) id += static_cast<char>(rd());
  sock_.set(zmq::sockopt::routing_id, zmq::buffer(id));
  // Events of this socket only, on an inproc address of its own. Without a
  // monitor, lost requests are still sent again on the timer.
  static std::atomic<uint64_t> serial{0};
  std::string addr = "inproc://muster-client-monitor-" + std::to_string(::getpid()) + "-" +
                     std::to_string(serial++);
  if (zmq_socket_monitor(sock_.handle(), addr.c_str(),
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) == 0) {
    try {
      monitor_.set(zmq::sockopt::linger, 0);
      monitor_.connect(addr);
      monitoring_ = true;
    } catch (const zmq::error_t&) {
      zmq_socket_monitor(sock_.handle(), nullptr, 0);
    }
  }
  try {
    sock_.connect(target_);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::kInvalidArgument,
                "cannot use endpoint '" + endpoint_ + "': " + e.what());
  }
}

void Connection::send_frame(uint64_t id, zmq::message_t frame) {
  // The daemon would drop the connection for a larger frame; say why here.
  if (frame.size() > limits::kMaxFrameBytes)
    throw Error(ErrorCode::kTooLarge,
                "request of " + std::to_string(frame.size()) +
                    " bytes exceeds the protocol's frame limit of " +
                    std::to_string(limits::kMaxFrameBytes) + " bytes (a store value may be up to " +
                    std::to_string(limits::kMaxValueBytes) +
                    " bytes; no option raises that: split larger data over several keys)");
  // What happened while nothing was in flight is no reason to resend; a
  // reconnect that lost requests in flight is.
  if (reconnected() && !pending_.empty()) resend_all();
  zmq::message_t copy;
  copy.copy(frame);  // shares the bytes: the original stays for resends
  send_now(copy);
  pending_.push_back({id, std::move(frame), nullptr});
}

void Connection::send_now(zmq::message_t& msg) {
  // Never a blocking send: a connection the daemon refused at its handshake
  // can leave the DEALER without a peer (seen under load, not every time),
  // and a send then blocks for good. Refused, the caller is told so; a queue that
  // stays full (a stalled daemon) is waited for as a reply would be.
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + request_timeout_, patience = start + patience_;
  for (;;) {
    try {
      if (sock_.send(msg, zmq::send_flags::dontwait)) return;
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      throw Error(ErrorCode::kInternal, e.what());
    }
    if (reconnected()) resend_all();
    if (refused_) refused();
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline && !(now < patience && daemon_alive()))
      throw Error(ErrorCode::kUnavailable,
                  "cannot send to musterd at " + endpoint_ + ": no connection to it took the " +
                      "request within " + std::to_string(request_timeout_.count()) +
                      " ms (is musterd running?)");
    zmq::pollitem_t item{monitor_.handle(), 0, ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, monitoring_ ? 1 : 0, std::chrono::milliseconds(10));
    } catch (const zmq::error_t&) {
      // EINTR: look again
    }
  }
}

Connection::Pending* Connection::find(uint64_t id) {
  for (auto& p : pending_)
    if (p.id == id) return &p;
  return nullptr;
}

void Connection::forget(uint64_t id) {
  pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                [&](const Pending& p) { return p.id == id; }),
                 pending_.end());
}

void Connection::resend(const zmq::message_t& frame) {
  try {
    zmq::message_t copy;
    copy.copy(const_cast<zmq::message_t&>(frame));
    (void)sock_.send(copy, zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // EINTR or a full queue: the next resend tries again.
  }
}

void Connection::resend_all() {
  for (const auto& p : pending_)
    if (!p.reply) resend(p.frame);
}

std::unique_ptr<Connection::Reply> Connection::await(uint64_t id, proto::MsgType type,
                                                     std::chrono::milliseconds extra_wait) {
  struct Done {  // the request is over, however this ends
    Connection& c;
    uint64_t id;
    ~Done() { c.forget(id); }
  } done{*this, id};
  Pending* mine = find(id);
  if (!mine) throw Error(ErrorCode::kInternal, "request " + std::to_string(id) + " was not sent");
  std::unique_ptr<Reply> got = std::move(mine->reply);
  auto now = std::chrono::steady_clock::now();
  const auto sent = now;
  const auto limit = request_timeout_ + extra_wait;
  auto deadline = now + limit;
  // A daemon that is alive but silent (SIGSTOP, a slow disk, a stalled VM)
  // is waited for up to the longer of this and the patience; a daemon that
  // is gone fails the request at `deadline`.
  const auto patience = now + std::max(limit, patience_);
  auto resend_every = kFirstResend;
  auto resend_at = now + resend_every;
  while (!got) {
    now = std::chrono::steady_clock::now();
    if (now >= resend_at) {
      resend(find(id)->frame);
      resend_every = std::min(2 * resend_every, kMaxResend);
      resend_at = now + resend_every;
    }
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::min(deadline, resend_at) - now);
    auto r = receive(std::max(left, std::chrono::milliseconds(0)));
    if (refused_) refused();
    if (!r) {
      now = std::chrono::steady_clock::now();
      if (now < deadline) continue;
      if (now < patience && daemon_alive()) {
        deadline = std::min(patience, now + std::chrono::milliseconds(500));
        continue;
      }
      timed_out(sent, limit);
    }
    const uint64_t rid = r->env.request_id;
    if (rid == 0 && replies_dropped(r->env)) {
      // The daemon dropped replies this connection did not read in time
      // (its queue was full): what they answered is asked again now.
      resend_all();
      resend_every = kFirstResend;
      resend_at = std::chrono::steady_clock::now() + resend_every;
    } else if (rid == id)
      got = std::move(r);
    else if (Pending* other = find(rid); other && !other->reply)
      other->reply = std::move(r);  // pipelined: kept until awaited
    // else a late reply to an abandoned request
  }
  const auto& env = got->env;
  if (env.type == static_cast<uint16_t>(proto::MsgType::kErrorReply)) {
    auto err = proto::ErrorReply::unpack(env.payload);
    throw Error(static_cast<ErrorCode>(err.code), err.message);
  }
  if (env.type != static_cast<uint16_t>(type))
    throw Error(ErrorCode::kBadMessage, std::string("musterd answered ") +
                                            proto::type_name(env.type) + " instead of " +
                                            proto::type_name(static_cast<uint16_t>(type)));
  return got;
}

std::unique_ptr<Connection::Reply> Connection::receive(std::chrono::milliseconds left) {
  zmq::pollitem_t items[2] = {{sock_.handle(), 0, ZMQ_POLLIN, 0},
                              {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
  try {
    zmq::poll(items, monitoring_ ? 2 : 1, left);
  } catch (const zmq::error_t& e) {
    // A signal (SIGCHLD from data loader workers, profilers) is no error.
    if (e.num() == EINTR) return nullptr;
    throw Error(ErrorCode::kInternal, e.what());
  }
  if (monitoring_ && (items[1].revents & ZMQ_POLLIN) && reconnected()) resend_all();
  if (!(items[0].revents & ZMQ_POLLIN)) return nullptr;
  auto got = std::make_unique<Reply>();
  if (!sock_.recv(got->frame, zmq::recv_flags::dontwait)) return nullptr;
  check_reply(got->frame);
  try {
    got->env = proto::decode_envelope(got->frame.data(), got->frame.size(), true);
  } catch (const Error& e) {
    throw Error(ErrorCode::kBadMessage, std::string("bad reply from musterd: ") + e.what());
  }
  return got;
}

void Connection::timed_out(std::chrono::steady_clock::time_point sent,
                           std::chrono::milliseconds limit) const {
  if (daemon_alive())
    throw Error(ErrorCode::kUnavailable,
                "musterd at " + endpoint_ + " (pid " + std::to_string(daemon_pid_) +
                    ") is running but has not answered for " +
                    std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                       std::chrono::steady_clock::now() - sent)
                                       .count()) +
                    " s (paused or stalled?)");
  throw Error(ErrorCode::kUnavailable,
              "no reply from musterd at " + endpoint_ + " within " + std::to_string(limit.count()) +
                  " ms (is musterd running? `muster run` starts one for its job)");
}

void Connection::check_reply(const zmq::message_t& reply) {
  if (!ipc_) return;
  // libzmq appends the sender's credentials, taken by the kernel when the
  // connection was made, to an ipc frame's "Peer-Address"; without them (a
  // libzmq built without SO_PEERCRED) connect()'s check stands alone.
  const char* prop = zmq_msg_gets(reply.handle(), "Peer-Address");
  int64_t uid, gid, pid;
  if (prop && trust::parse_peer_address(prop, uid, gid, pid)) {
    trust::check_reply_uid(uid, endpoint_);
    daemon_pid_ = pid;  // 0 when the daemon is outside our pid namespace
  }
}

bool Connection::replies_dropped(const proto::Envelope& env) {
  if (env.type != static_cast<uint16_t>(proto::MsgType::kErrorReply)) return false;
  return proto::ErrorReply::unpack(env.payload).code ==
         static_cast<int64_t>(ErrorCode::kRepliesDropped);
}

void Connection::refused() const {
  throw Error(ErrorCode::kQuotaExceeded,
              "musterd at " + endpoint_ + " refused this connection at its handshake (status " +
                  std::to_string(refused_) +
                  "): this user already holds as many connections as the daemon allows "
                  "(musterd --max-connections-per-uid); end some clients or ask the operator "
                  "to raise it");
}

bool Connection::daemon_alive() const {
  if (daemon_pid_ <= 0 || lost_) return false;
  // EPERM: it exists, as root's system daemon does for a user.
  return ::kill(static_cast<pid_t>(daemon_pid_), 0) == 0 || errno == EPERM;
}

bool Connection::reconnected() {
  bool back = false;
  while (monitoring_) {
    zmq::message_t ev;
    try {
      if (!monitor_.recv(ev, zmq::recv_flags::dontwait)) break;
      for (bool more = ev.more(); more;) {  // the endpoint frame
        zmq::message_t rest;
        more = monitor_.recv(rest, zmq::recv_flags::dontwait) && rest.more();
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      break;
    }
    if (ev.size() < sizeof(uint16_t)) continue;
    uint16_t event;
    std::memcpy(&event, ev.data(), sizeof event);
    uint32_t value = 0;
    if (ev.size() >= sizeof event + sizeof value)
      std::memcpy(&value, static_cast<const char*>(ev.data()) + sizeof event, sizeof value);
    if (event == ZMQ_EVENT_DISCONNECTED) {
      lost_ = true;
    } else if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) {
      refused_ = value ? value : 400;  // the daemon's ZAP status code
    } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED) {
      refused_ = 0;
      if (lost_) back = true;
      lost_ = false;
    }
  }
  return back;
}

}  // namespace muster::detail
