#include "server/server.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <zmq.hpp>

#include "core/state.hpp"
#include "endpoint.hpp"
#include "liveness/pidwatch.hpp"
#include "log.hpp"
#include "peer/secure.hpp"
#include "persist/reply_cache.hpp"
#include "persist/state_file.hpp"
#include "protocol/limits.hpp"
#include "server/runtime_dir.hpp"

namespace muster::daemon {

struct Server::Impl {
  zmq::context_t ctx{1};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  PidWatch watch;
  std::unique_ptr<State> state;
  std::string socket_path;
  // Peering: our listener (when peer_bind is set), its ZAP handler (CURVE),
  // and one DEALER per coordinator we talk to, by host:port.
  std::optional<peer::Security> security;
  std::unique_ptr<peer::ZapHandler> zap;
  std::optional<zmq::socket_t> peer;
  std::map<std::string, zmq::socket_t> links;
  std::string peer_endpoint_file;
  ReplyCache replies;
  // The local socket's connections (ReplyTo::conn): a token per connection,
  // by the fd its requests come from, dropped when ZeroMQ reports the
  // connection gone (a monitor on the router), so that no reply follows a
  // routing id to whoever connects under it next.
  zmq::socket_t events{ctx, zmq::socket_type::pair};
  std::unordered_map<int, uint64_t> conn_of_fd;
  std::unordered_set<uint64_t> live_conns;
  uint64_t next_conn = 1;
  void drain_events();
  uint64_t conn_for(const zmq::message_t& frame);
  std::unique_ptr<StateFile> state_file;
  int state_lock_fd = -1;  // when the state dir is not the runtime dir
};

namespace {

// A frame as a message. A large one (a broadcast's chunk) is handed over,
// not copied: ZeroMQ frees it once sent (or dropped), on its I/O thread.
zmq::message_t take_frame(std::string& frame) {
  constexpr size_t kHandOver = 64 * 1024;
  if (frame.size() < kHandOver) return zmq::message_t(frame.data(), frame.size());
  auto* owned = new std::string(std::move(frame));
  return zmq::message_t(
      owned->data(), owned->size(),
      [](void*, void* hint) { delete static_cast<std::string*>(hint); }, owned);
}

void send(zmq::socket_t& s, Outgoing& o) {
  // A vanished peer is not an error for the daemon: ROUTER drops the reply.
  if (!s) return;
  s.send(zmq::buffer(o.to.routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  if (o.to.delimiter)
    s.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
  s.send(take_frame(o.frame), zmq::send_flags::dontwait);
}

// The sender's uid and pid. For an ipc:// connection libzmq (4.3, built with
// SO_PEERCRED support, as Debian's is) appends the peer's credentials, taken
// by the kernel when the peer connected, to every frame's "Peer-Address"
// property: "<address>:<uid>:<gid>:<pid>" ("localhost:1000:1000:4242" with
// libzmq 4.3.4). False when the property is missing or malformed.
bool peer_credentials(const zmq::message_t& frame, int64_t& uid, int64_t& pid) {
  const char* prop = zmq_msg_gets(frame.handle(), "Peer-Address");
  if (!prop) return false;
  std::string_view s(prop);
  int64_t fields[3];  // uid, gid, pid, read from the end
  for (int i = 2; i >= 0; --i) {
    auto colon = s.rfind(':');
    if (colon == std::string_view::npos) return false;
    auto digits = s.substr(colon + 1);
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), fields[i]);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || fields[i] < 0)
      return false;
    s = s.substr(0, colon);
  }
  uid = fields[0];
  pid = fields[2];
  return true;
}

constexpr const char* kRouterEvents = "inproc://musterd-router-events";

}  // namespace

void Server::Impl::drain_events() {
  for (;;) {
    zmq::message_t ev;
    if (!events.recv(ev, zmq::recv_flags::dontwait)) return;
    for (bool more = ev.more(); more;) {  // the endpoint frame
      zmq::message_t rest;
      more = events.recv(rest, zmq::recv_flags::dontwait) && rest.more();
    }
    // libzmq 4.3's event frame: uint16 event, uint32 value (the fd).
    if (ev.size() < 6) continue;
    uint16_t event;
    uint32_t fd;
    std::memcpy(&event, ev.data(), sizeof event);
    std::memcpy(&fd, static_cast<const char*>(ev.data()) + 2, sizeof fd);
    if (event != ZMQ_EVENT_DISCONNECTED) continue;
    if (auto it = conn_of_fd.find(static_cast<int>(fd)); it != conn_of_fd.end()) {
      live_conns.erase(it->second);
      conn_of_fd.erase(it);
    }
  }
}

uint64_t Server::Impl::conn_for(const zmq::message_t& frame) {
  // ZMQ_SRCFD is deprecated but kept in 4.3: the fd a frame came in on.
  int fd = zmq_msg_get(const_cast<zmq_msg_t*>(frame.handle()), ZMQ_SRCFD);
  if (fd < 0) return 0;
  auto [it, fresh] = conn_of_fd.try_emplace(fd, 0);
  if (fresh) {
    it->second = next_conn++;
    live_conns.insert(it->second);
  }
  return it->second;
}

namespace {

// The STATUS= line: jobs, GPU leases and live ranks.
std::string summary(const State& state) {
  auto st = state.status();
  size_t leased = 0, ranks = 0;
  for (const auto& d : st.devices)
    if (!d.job.empty()) ++leased;
  for (const auto& j : st.jobs)
    for (const auto& r : j.ranks)
      if (r.state == "reserved" || r.state == "running" || r.state == "joined") ++ranks;
  return std::to_string(st.jobs.size()) + " job(s), " + std::to_string(leased) + " of " +
         std::to_string(st.devices.size()) + " GPU(s) leased, " + std::to_string(ranks) +
         " rank(s)";
}

}  // namespace

Server::Server(Config cfg) : impl_(std::make_unique<Impl>()), cfg_(std::move(cfg)) {
#if defined(__GLIBC__)
  // A broadcast across nodes passes 4 MiB chunks through the daemon, a few
  // at a time: left to itself, glibc maps each anew and unmaps it when it
  // is freed (page faults and zeroed pages on every chunk, 20% slower).
  // Kept on the heap instead, and at most 64 MiB of freed heap is kept.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 64 << 20);
#endif
  if (cfg_.state_dir.empty()) cfg_.state_dir = cfg_.runtime_dir;
  inventory_ = gpu::discover(cfg_.simulate_gpus);
  if (cfg_.devices_given) {
    for (auto d : cfg_.devices) {
      auto it = std::find_if(inventory_.devices.begin(), inventory_.devices.end(),
                             [&](const gpu::Device& x) { return x.index == d; });
      if (it == inventory_.devices.end())
        throw Error(ErrorCode::kInvalidArgument, "--devices names GPU " + std::to_string(d) +
                                                     ", but this node has " +
                                                     std::to_string(inventory_.devices.size()) +
                                                     " GPU(s) (source: " + inventory_.source + ")");
      if (std::find_if(allowed_.begin(), allowed_.end(),
                       [&](const gpu::Device& x) { return x.index == d; }) == allowed_.end())
        allowed_.push_back(*it);
    }
  } else {
    allowed_ = inventory_.devices;
  }
  impl_->state = std::make_unique<State>(allowed_, impl_->watch);
  // Peering settings are checked now; a daemon that never peers needs none,
  // so a bad or missing key only refuses multi-node jobs (and the listener).
  std::string unavailable;
  try {
    impl_->security = peer::Security::from_config(cfg_);
  } catch (const Error& e) {
    if (!cfg_.peer_bind.empty()) throw;
    unavailable = e.what();
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  impl_->state->set_cluster(std::string(host) + ":" + cfg_.runtime_dir, cfg_.peer_timeout,
                            unavailable, cfg_.tree_width);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw Error(ErrorCode::kInternal, "eventfd failed");
}

Server::~Server() {
  if (!impl_->socket_path.empty()) ::unlink(impl_->socket_path.c_str());
  if (!impl_->peer_endpoint_file.empty()) ::unlink(impl_->peer_endpoint_file.c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (impl_->state_lock_fd >= 0) ::close(impl_->state_lock_fd);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Server::bind() {
  // Refused when another user made it or may write to it (they could read
  // the state, or swap the socket).
  prepare_runtime_dir(cfg_.runtime_dir);
  std::string lock_path = cfg_.runtime_dir + "/musterd.lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd_ < 0)
    throw Error(ErrorCode::kInternal, "cannot open " + lock_path + ": " + std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw Error(ErrorCode::kConflict, "another musterd already serves " + cfg_.runtime_dir);
  }
  // The state before the socket: nobody is served from an empty state that
  // a restarted daemon should have taken over.
  load_state();
  // We hold the lock, so a socket file left here is stale.
  impl_->socket_path = cfg_.runtime_dir + "/musterd.sock";
  ::unlink(impl_->socket_path.c_str());
  endpoint_ = endpoint_for_dir(cfg_.runtime_dir);
  auto& r = impl_->router;
  r.set(zmq::sockopt::linger, 0);
  r.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::kMaxFrameBytes + 4096));
  // No handover: a second connection that presents a connected client's
  // routing id is ignored by ZeroMQ rather than given that client's
  // replies. A client reconnecting after a restart meets a new socket.
  r.set(zmq::sockopt::router_handover, 0);
  if (zmq_socket_monitor(r.handle(), kRouterEvents, ZMQ_EVENT_DISCONNECTED) != 0)
    throw Error(ErrorCode::kInternal,
                std::string("cannot monitor the socket: ") + zmq_strerror(zmq_errno()));
  impl_->events.set(zmq::sockopt::linger, 0);
  // Unbounded, and polled by the loop: a full event pipe would block
  // ZeroMQ's one I/O thread (every socket of the daemon) until it is read,
  // and connections that never send anything would not wake us to read it.
  impl_->events.set(zmq::sockopt::rcvhwm, 0);
  impl_->events.connect(kRouterEvents);
  try {
    r.bind(endpoint_);
  } catch (const zmq::error_t& e) {
    impl_->socket_path.clear();
    throw Error(ErrorCode::kInternal, "cannot bind " + endpoint_ + ": " + e.what());
  }
  // Owner and group only: other users must not reach the daemon.
  ::chmod(impl_->socket_path.c_str(), 0660);
  if (cfg_.socket_gid >= 0 && ::chown(impl_->socket_path.c_str(), static_cast<uid_t>(-1),
                                      static_cast<gid_t>(cfg_.socket_gid)) != 0)
    throw Error(ErrorCode::kInternal, "cannot give " + impl_->socket_path + " to group " +
                                          std::to_string(cfg_.socket_gid) + ": " +
                                          std::strerror(errno));
  log::notice("listening on " + endpoint_ + ", " + std::to_string(allowed_.size()) +
              " GPU(s) to hand out (source: " + inventory_.source + ")");
  if (!cfg_.peer_bind.empty()) bind_peer();
}

void Server::bind_peer() {
  const peer::Security& sec = *impl_->security;
  // The ZAP handler must exist before the CURVE socket binds.
  if (!sec.plain) impl_->zap = std::make_unique<peer::ZapHandler>(impl_->ctx, sec);
  auto& p = impl_->peer.emplace(impl_->ctx, zmq::socket_type::router);
  p.set(zmq::sockopt::linger, 0);
  p.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::kMaxFrameBytes + 4096));
  peer::make_server(p, sec);
  std::string want = "tcp://" + cfg_.peer_bind + ":" + std::to_string(cfg_.peer_port);
  try {
    p.bind(want);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::kInternal, "cannot listen for peers on " + want + ": " + e.what());
  }
  peer_endpoint_ = p.get(zmq::sockopt::last_endpoint);
  impl_->state->set_peer_endpoint(peer_endpoint_.substr(peer_endpoint_.find("://") + 3));
  // Tests and scripts that asked for any free port read it here.
  impl_->peer_endpoint_file = cfg_.runtime_dir + "/peer-endpoint";
  std::ofstream(impl_->peer_endpoint_file) << peer_endpoint_ << "\n";
  log::notice("listening for peer daemons on " + peer_endpoint_ +
              (sec.plain ? " (plain TCP: peer_plain is set)" : " (CURVE)"));
}

void Server::load_state() {
  if (cfg_.state_dir != cfg_.runtime_dir) {
    // Two daemons must not share one state file.
    prepare_runtime_dir(cfg_.state_dir, "--state-dir");
    std::string lock_path = cfg_.state_dir + "/state.lock";
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0)
      throw Error(ErrorCode::kInternal, "cannot open " + lock_path + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      throw Error(ErrorCode::kConflict,
                  "another musterd already keeps its state in " + cfg_.state_dir);
    }
    impl_->state_lock_fd = fd;
  }
  impl_->state_file = std::make_unique<StateFile>(cfg_.state_dir);
  impl_->state_file->load(*impl_->state, impl_->replies);
}

void Server::stop() noexcept {
  uint64_t one = 1;
  ssize_t r = ::write(wake_fd_, &one, sizeof one);
  (void)r;
}

// Reads up to a bounded batch of requests from a ROUTER (the local socket or
// the peer one) so that pid exits and timeouts are never starved.
void Server::receive(zmq::socket_t& sock, bool from_peer, State& state,
                     std::vector<Outgoing>& out) {
  // A disconnect reported first keeps a new connection on a reused fd from
  // inheriting the old one's token.
  if (!from_peer) impl_->drain_events();
  for (int n = 0; n < 1024; ++n) {
    std::vector<zmq::message_t> frames;
    zmq::message_t part;
    if (!sock.recv(part, zmq::recv_flags::dontwait)) break;
    frames.push_back(std::move(part));
    while (frames.back().more()) {
      zmq::message_t next;
      (void)sock.recv(next);
      frames.push_back(std::move(next));
    }
    ReplyTo to;
    to.routing_id = frames[0].to_string();
    to.from_peer = from_peer;
    if (!from_peer) to.conn = impl_->conn_for(frames.back());
    const zmq::message_t* body = nullptr;
    if (frames.size() == 2) {
      body = &frames[1];
    } else if (frames.size() == 3 && frames[1].size() == 0 && !from_peer) {
      to.delimiter = true;
      body = &frames[2];
    }
    if (!body) {
      out.push_back({to, proto::encode_error(0, ErrorCode::kBadMessage,
                                             "expected one frame per request, got " +
                                                 std::to_string(frames.size() - 1))});
      continue;
    }
    try {
      // Binary fields point into the frame, which outlives the handling.
      auto env = proto::decode_envelope(body->data(), body->size(), true);
      to.request_id = env.request_id;
      // Every local request is checked against its sender's uid
      // (access.cpp), the reply cache's answers included; a sender the
      // daemon cannot identify is refused, never trusted. Peers are daemons,
      // authenticated by CURVE instead.
      if (!from_peer && !peer_credentials(*body, to.peer_uid, to.peer_pid)) {
        out.push_back({to, proto::encode_error(env.request_id, ErrorCode::kPermissionDenied,
                                               "musterd cannot tell which user sent this "
                                               "request: the connection carries no peer "
                                               "credentials (only ipc:// clients are served)")});
        continue;
      }
      uint64_t hash = 0;  // peers' requests are not tracked
      if (!from_peer) {
        hash = ReplyCache::hash({static_cast<const char*>(body->data()), body->size()});
        // A request sent again (same client, same id): answered once.
        auto& replies = impl_->replies;
        std::string again;
        switch (replies.check(to, hash, &again)) {
          case ReplyCache::Seen::kAnswered:
            out.push_back({to, std::move(again)});
            continue;
          case ReplyCache::Seen::kPending:
            continue;  // still waiting: its one reply comes when the wait ends
          case ReplyCache::Seen::kForeign:
            log::warning("refused a request from uid " + std::to_string(to.peer_uid) + " (pid " +
                         std::to_string(to.peer_pid) + ") under another uid's routing id");
            out.push_back(
                {to, proto::encode_error(env.request_id, ErrorCode::kPermissionDenied,
                                         "this connection's routing id belongs to another user's "
                                         "client; choose another (libmuster picks a random one)")});
            continue;
          case ReplyCache::Seen::kNew:
            break;
        }
      }
      if (!from_peer) impl_->replies.begin(to, env.type, hash);
      state.handle(to, env, out);
    } catch (const proto::EnvelopeError& e) {
      log::debug(std::string("refused a frame: ") + e.what());
      out.push_back({to, proto::encode_error(e.request_id, e.code(), e.what())});
    }
  }
}

// Sends what the state produced: replies on the socket they came in on,
// requests to coordinators on a connection per coordinator (made on first
// use, closed once the state forgets the coordinator).
void Server::deliver(std::vector<Outgoing>& out) {
  // Connections that ended by now must not get replies: their routing ids
  // may already be someone else's (a client that reconnected sends its
  // request again and is answered on its new connection).
  impl_->drain_events();
  for (auto& o : out) {
    if (o.link.empty()) {
      if (!o.to.from_peer) {
        if (o.to.conn != 0 && !impl_->live_conns.count(o.to.conn)) continue;
        send(impl_->router, o);
      } else if (impl_->peer)
        send(*impl_->peer, o);
      continue;
    }
    auto it = impl_->links.find(o.link);
    if (it == impl_->links.end()) {
      if (!impl_->security) continue;  // rendezvous refused these already
      zmq::socket_t s(impl_->ctx, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::kMaxFrameBytes + 4096));
      peer::make_client(s, *impl_->security);
      try {
        s.connect("tcp://" + o.link);
      } catch (const zmq::error_t& e) {
        log::warning("cannot connect to coordinator " + o.link + ": " + e.what());
        continue;  // the state gives up on it after the peer timeout
      }
      it = impl_->links.emplace(o.link, std::move(s)).first;
    }
    it->second.send(take_frame(o.frame), zmq::send_flags::dontwait);
  }
  std::erase_if(impl_->links, [&](const auto& kv) { return !impl_->state->has_link(kv.first); });
}

void Server::run() {
  auto& router = impl_->router;
  auto& state = *impl_->state;
  bool dirty = true;  // something to save before the next replies go out
  std::vector<Outgoing> out;
  std::vector<zmq::pollitem_t> items;
  std::vector<int64_t> item_pids;
  std::vector<std::string> link_names;
  bool had_job = false;
  auto idle_since = Clock::now();
  std::string last_status;
  auto next_tick = Clock::now();
  for (;;) {
    if (hooks_.status_changed) {
      auto now_status = summary(state);
      if (now_status != last_status) hooks_.status_changed(now_status);
      last_status = std::move(now_status);
    }
    if (hooks_.tick.count() > 0 && Clock::now() >= next_tick) {
      hooks_.on_tick();
      next_tick = Clock::now() + hooks_.tick;
    }
    items.clear();
    item_pids.clear();
    link_names.clear();
    items.push_back({router.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({nullptr, wake_fd_, ZMQ_POLLIN, 0});
    items.push_back({impl_->events.handle(), 0, ZMQ_POLLIN, 0});
    // Peer sockets next, then the pidfds: [3, first_pid) are sockets.
    size_t peer_at = 0, zap_at = 0;
    if (impl_->peer) {
      peer_at = items.size();
      items.push_back({impl_->peer->handle(), 0, ZMQ_POLLIN, 0});
    }
    if (impl_->zap) {
      zap_at = items.size();
      items.push_back({impl_->zap->handle(), 0, ZMQ_POLLIN, 0});
    }
    size_t links_at = items.size();
    for (auto& [name, sock] : impl_->links) {
      items.push_back({sock.handle(), 0, ZMQ_POLLIN, 0});
      link_names.push_back(name);
    }
    size_t first_pid = items.size();
    for (const auto& f : impl_->watch.fds()) {
      items.push_back({nullptr, f.fd, ZMQ_POLLIN, 0});
      item_pids.push_back(f.pid);
    }
    long timeout_ms = -1;
    if (auto d = state.next_deadline()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*d - Clock::now()).count();
      timeout_ms = std::max<long>(0, left + 1);
    }
    if (impl_->watch.needs_sweep() || (cfg_.exit_when_idle && state.job_count() == 0))
      timeout_ms = timeout_ms < 0 ? 200 : std::min(timeout_ms, 200L);
    // Heartbeats, lost peers and last calls run on a coarse clock.
    if (state.cluster_active()) timeout_ms = timeout_ms < 0 ? 50 : std::min(timeout_ms, 50L);
    if (hooks_.tick.count() > 0) {
      // Wake up for the watchdog even when nothing else happens.
      auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - Clock::now()).count();
      left = std::max<long>(0, left + 1);
      timeout_ms = timeout_ms < 0 ? left : std::min(timeout_ms, left);
    }
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(timeout_ms));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
      continue;  // a signal handler ran; it wakes us through wake_fd_
    }

    if (items[1].revents & ZMQ_POLLIN) break;
    if (items[2].revents & ZMQ_POLLIN) impl_->drain_events();
    for (size_t i = first_pid; i < items.size(); ++i)
      if (items[i].revents & ZMQ_POLLIN) {
        state.on_pid_exit(item_pids[i - first_pid], out);
        dirty = true;
      }
    if (zap_at && (items[zap_at].revents & ZMQ_POLLIN)) impl_->zap->handle_ready();
    if (peer_at && (items[peer_at].revents & ZMQ_POLLIN)) receive(*impl_->peer, true, state, out);
    for (size_t i = links_at; i < first_pid; ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      auto& sock = impl_->links.at(link_names[i - links_at]);
      for (int n = 0; n < 1024; ++n) {
        zmq::message_t msg;
        if (!sock.recv(msg, zmq::recv_flags::dontwait)) break;
        while (msg.more()) {  // a DEALER reply is one frame; drop anything else
          zmq::message_t rest;
          (void)sock.recv(rest);
        }
        state.on_link_frame(link_names[i - links_at], msg.data(), msg.size(), out);
      }
    }
    for (auto pid : impl_->watch.sweep_dead()) {
      state.on_pid_exit(pid, out);
      dirty = true;
    }

    receive(router, false, state, out);
    state.expire(Clock::now(), out);
    if (state.cluster_active()) state.cluster_tick(Clock::now(), out);
    if (impl_->replies.complete(out)) dirty = true;
    // Saved before any of these replies leaves: a client never acts on an
    // answer that a restarted daemon would not know.
    if (dirty && impl_->state_file->save(state, impl_->replies)) dirty = false;
    deliver(out);
    out.clear();
    if (cfg_.exit_when_idle) {
      auto now = Clock::now();
      if (state.job_count() > 0) {
        had_job = true;
        idle_since = now;
      } else if (now - idle_since >
                 (had_job ? std::chrono::seconds(1) : std::chrono::seconds(10))) {
        log::info("no jobs left; the embedded daemon stops");
        break;
      }
    }
  }
  state.cancel_all(out);
  deliver(out);
  log::notice("stopping");
}

}  // namespace muster::daemon
