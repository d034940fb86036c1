#include "server/server.hpp"

#include <fcntl.h>
#include <malloc.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "cluster/multi_node.hpp"
#include "dirs/runtime_dir.hpp"
#include "endpoint.hpp"
#include "event/boundary.hpp"
#include "gpu/nvml.hpp"
#include "gpu/xid_watch.hpp"
#include "log.hpp"
#include "protocol/limits.hpp"
#include "server/accept_guard.hpp"
#include "server/frames.hpp"
#include "server/permute_thread.hpp"
#include "server/runtime.hpp"
#include "slurm/verified_gpus.hpp"

namespace muster::daemon {

Server::Server(Config cfg, Env& env) : rt_(std::make_unique<Runtime>()), cfg_(std::move(cfg)) {
  rt_->env = &env;
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
  rt_->state = std::make_unique<State>(allowed_, rt_->watch);
  rt_->state->set_quotas(cfg_.quotas);
  rt_->state->reports().set_gpu_source(inventory_.source);
  if (auto nvml = inventory_.nvml)
    rt_->state->set_gpu_use(
        {[nvml](uint32_t i) { return gpu::compute_pids(*nvml, i); }, gpu::parent_pid,
         // rt_->cgroups is made later than this: asked at call time.
         [rt = rt_.get()](int64_t pid) { return rt->cgroups ? rt->cgroups->job_of(pid) : ""; },
         cfg_.foreign_gpu_use == "refuse"});
  if (cfg_.slurm_gpus == "verified") {
    auto verified = std::make_shared<VerifiedGpus>(cfg_.slurm_dir);
    rt_->state->access().set_slurm_gpus(
        [verified](int64_t pid, int64_t owner) { return verified->allowed(pid, owner); });
    log::notice(
        "slurm-gpus = verified: GPUs are leased only within Slurm jobs' allocations, as "
        "recorded in " +
        cfg_.slurm_dir);
  }
  // Peering settings are checked now; a daemon that never peers needs none,
  // so a bad or missing key only refuses multi-node jobs (and the listener).
  std::string unavailable;
  try {
    rt_->security = peer::Security::from_settings(cfg_.peer_keys);
  } catch (const Error& e) {
    if (!cfg_.peer_bind.empty()) throw;
    unavailable = e.what();
  }
  std::string host = host_name();
  rt_->state->cluster().configure(host + ":" + cfg_.runtime_dir, cfg_.peer_timeout, unavailable,
                                  cfg_.tree_width);
  rt_->state->reports().set_stuck_after(cfg_.stuck_after);
  rt_->state->cluster().set_node_name(cfg_.node_name.empty() ? host : cfg_.node_name);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  leave_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0 || leave_fd_ < 0) throw Error(ErrorCode::kInternal, "eventfd failed");
}

Server::~Server() {
  if (!rt_->socket_path.empty()) {
    ::unlink(rt_->socket_path.c_str());
    ::unlink((rt_->socket_path + ".full").c_str());  // set aside by the fd guard
  }
  if (!rt_->peer_endpoint_file.empty()) ::unlink(rt_->peer_endpoint_file.c_str());
  if (lock_fd_ >= 0) ::close(lock_fd_);
  if (rt_->state_lock_fd >= 0) ::close(rt_->state_lock_fd);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  if (leave_fd_ >= 0) ::close(leave_fd_);
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
  rt_->cgroups =
      std::make_unique<contain::JobCgroups>(cfg_.containment, cfg_.runtime_dir, rt_->watch);
  rt_->state->reports().set_containment(rt_->cgroups->description());
  // We hold the lock, so a socket file left here is stale.
  rt_->socket_path = cfg_.runtime_dir + "/musterd.sock";
  ::unlink(rt_->socket_path.c_str());
  ::unlink((rt_->socket_path + ".full").c_str());
  endpoint_ = endpoint_for_dir(cfg_.runtime_dir);
  start_fd_guard();
  start_admission();
  auto& r = rt_->router;
  r.set(zmq::sockopt::linger, 0);
  // Replies wait for a client that does not read up to this many; the one
  // after is dropped (ZMQ_ROUTER_MANDATORY says so instead of blocking or
  // dropping silently): Runtime::deliver.
  r.set(zmq::sockopt::sndhwm, cfg_.reply_queue);
  rt_->unread.emplace(static_cast<size_t>(cfg_.reply_queue) + 1);
  rt_->conns.on_gone([rt = rt_.get()](uint64_t token) { rt->unread->ended(token); });
  r.set(zmq::sockopt::router_mandatory, 1);
  limit_listener(r);
  r.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::kMaxFrameBytes + 4096));
  // No handover: a second connection that presents a connected client's
  // routing id is ignored by ZeroMQ rather than given that client's
  // replies. A client reconnecting after a restart meets a new socket.
  r.set(zmq::sockopt::router_handover, 0);
  peer::make_local_server(r);
  rt_->conns.monitor(r);
  try {
    r.bind(endpoint_);
  } catch (const zmq::error_t& e) {
    rt_->socket_path.clear();
    throw Error(ErrorCode::kInternal, "cannot bind " + endpoint_ + ": " + e.what());
  }
  rt_->fds->set_local_path(rt_->socket_path);
  // Owner and group only: other users must not reach the daemon.
  ::chmod(rt_->socket_path.c_str(), 0660);
  if (cfg_.socket_gid >= 0 && ::chown(rt_->socket_path.c_str(), static_cast<uid_t>(-1),
                                      static_cast<gid_t>(cfg_.socket_gid)) != 0)
    throw Error(ErrorCode::kInternal, "cannot give " + rt_->socket_path + " to group " +
                                          std::to_string(cfg_.socket_gid) + ": " +
                                          std::strerror(errno));
  rt_->user_sockets.emplace(r, cfg_.runtime_dir, rt_->fds->limit());
  rt_->user_sockets->want(::geteuid());
  // Another uid's socket needs root to give it away. The owners of the
  // jobs restored: their ranks connect again to the sockets they had,
  // which a runtime directory made anew (systemd's stop) no longer holds.
  if (::geteuid() == 0) {
    rt_->user_sockets->want_group(cfg_.socket_gid);
    for (const auto& [key, job] : rt_->state->jobs()) rt_->user_sockets->want(job.owner_uid);
  }
  rt_->user_sockets->bind_wanted(false);
  rt_->fds->set_users_dir(rt_->user_sockets->dir());
  log::notice("listening on " + endpoint_ + ", " + std::to_string(allowed_.size()) +
              " GPU(s) to hand out (source: " + inventory_.source + ")");
  if (!cfg_.peer_bind.empty()) bind_peer();
  rt_->observe.start(cfg_);
}

void Server::bind_peer() {
  const peer::Security& sec = *rt_->security;
  auto& p = rt_->peer.emplace(rt_->ctx, zmq::socket_type::router);
  p.set(zmq::sockopt::linger, 0);
  p.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::kMaxFrameBytes + 4096));
  peer::make_server(p, sec);
  if (sec.plain) peer::make_plain_server(p);
  limit_listener(p);
  rt_->fds->monitor_peer(p);
  std::string want = "tcp://" + cfg_.peer_bind + ":" + std::to_string(cfg_.peer_port);
  try {
    p.bind(want);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::kInternal, "cannot listen for peers on " + want + ": " + e.what());
  }
  peer_endpoint_ = p.get(zmq::sockopt::last_endpoint);
  cap_peer_port(std::stoi(peer_endpoint_.substr(peer_endpoint_.rfind(':') + 1)));
  rt_->state->cluster().set_peer_endpoint(peer_endpoint_.substr(peer_endpoint_.find("://") + 3));
  // Tests and scripts that asked for any free port read it here.
  rt_->peer_endpoint_file = cfg_.runtime_dir + "/peer-endpoint";
  std::ofstream(rt_->peer_endpoint_file) << peer_endpoint_ << "\n";
  log::notice("listening for peer daemons on " + peer_endpoint_ +
              (sec.plain ? " (plain TCP: peer_plain is set)" : " (CURVE)"));
}

// A reserve that covers what can still come after the listeners pause:
// both backlogs (kBacklog each) of connections the kernel completed, and
// the fds the daemon opens itself between two counts (FdGuard::check):
// state and log files, a pidfd per watched process, two per link to a
// coordinator, libzmq's mailboxes, and what libzmq's I/O thread accepts
// before a loop starved of CPU counts it (a fresh-clone CI on 2 busy cores
// saw 214 past the ceiling, and libzmq aborted on EMFILE with 256 kept).
// 384 at the smallest (a 1,024 limit leaves ~640 for connections); a
// sixteenth of larger limits.
void Server::start_fd_guard() {
  rlimit before{};
  ::getrlimit(RLIMIT_NOFILE, &before);
  uint64_t limit = raise_fd_limit();
  uint64_t reserve = cfg_.fd_reserve ? cfg_.fd_reserve : std::max<uint64_t>(384, limit / 16);
  rt_->fds.emplace(rt_->ctx, limit, reserve);
  // A link to a coordinator costs three sockets (an fd each) and a
  // connection: all of them together get an eighth of the fds.
  rt_->state->cluster().set_link_cap(std::max<uint64_t>(64, limit / 8));
  arm_accept_guard();  // the backstop: accept_guard.hpp
  log::notice(
      "file descriptors: limit " + std::to_string(limit) +
      (before.rlim_cur < limit ? " (raised from " + std::to_string(before.rlim_cur) + ")" : "") +
      "; new connections wait while over " + std::to_string(rt_->fds->ceiling()) +
      " are open (--fd-reserve " + std::to_string(reserve) + ")");
}

// Who may hold how many connections (conn_caps.hpp), told by both
// listeners' monitors and asked by the ZAP handler, which exists before
// either socket binds (a CURVE socket must not bind without it). The
// monitors are read first, so the connection in its handshake is counted.
void Server::start_admission() {
  auto& rt = *rt_;
  rt.caps.emplace(cfg_.max_conns_per_uid, cfg_.max_conns_per_peer,
                  std::chrono::milliseconds(kHandshakeMs));
  cap_at_accept(cfg_.max_conns_per_uid, cfg_.max_conns_per_peer);
  rt.conns.on_event([&rt](bool accepted, int fd) {
    accepted ? rt.caps->local_accepted(fd) : rt.caps->local_closed(fd);
  });
  const bool plain = rt.security && rt.security->plain;
  rt.fds->on_peer_event([&rt, plain](bool accepted, int fd) {
    accepted ? rt.caps->peer_accepted(fd, plain) : rt.caps->peer_closed(fd);
  });
  peer::ZapPolicy policy;
  // Each handshake is a connection libzmq's I/O thread has accepted: the
  // fd guard looks at once, not only at the round's end. A flood of
  // connections makes a round of hundreds of handshakes, and the I/O
  // thread accepts on meanwhile; past the limit its ipc listener aborts
  // the daemon (libzmq asserts on EMFILE there). CI saw a round end with
  // 966 of 1,024 fds open and the next accept abort.
  policy.local = [&rt](int64_t uid) {
    rt.conns.drain();
    rt.fds->check(rt.conns.open());
    std::string refused = rt.caps->admit_local(uid);
    if (refused.empty() && rt.user_sockets) rt.user_sockets->want(uid);
    return refused;
  };
  policy.peer = [&rt](const std::string& address) {
    rt.fds->drain_peer();
    rt.fds->check(rt.conns.open());
    return rt.caps->admit_peer(address);
  };
  rt.zap = std::make_unique<peer::ZapHandler>(rt.ctx, rt.security ? &*rt.security : nullptr,
                                              std::move(policy));
}

// Every listener: a backlog the reserve is sized for (connections the
// kernel completes while the fd guard pauses; libzmq's default of 100, set
// here so the reserve's sum rests on it: 64 made 256 ranks that connect at
// once wait for libzmq's reconnect more often), and handshakes that end
// within 5 s, so a connection that never speaks holds its fd that long
// (libzmq: 30 s).
void Server::limit_listener(zmq::socket_t& s) {
  constexpr int kBacklog = 100;
  s.set(zmq::sockopt::backlog, kBacklog);
  s.set(zmq::sockopt::handshake_ivl, kHandshakeMs);
}

void Server::load_state() {
  if (cfg_.state_dir != cfg_.runtime_dir) {
    // Two daemons must not share one state file.
    prepare_runtime_dir(cfg_.state_dir, "--state-dir");
    std::string lock_path = cfg_.state_dir + "/state.lock";
    int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0)
      throw Error(ErrorCode::kInternal, "cannot open " + lock_path + ": " + std::strerror(errno));
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      ::close(fd);
      throw Error(ErrorCode::kConflict,
                  "another musterd already keeps its state in " + cfg_.state_dir);
    }
    rt_->state_lock_fd = fd;
  }
  // Every state file is made relative to the directory as checked now,
  // never through its path again (a link put there later leads nowhere).
  const int dir_fd = open_own_dir(cfg_.state_dir, "refusing state directory ", "--state-dir");
  derive_ceilings(cfg_.quotas, cfg_.max_memory == "auto", cfg_.max_state_bytes == "auto", dir_fd);
  rt_->state->set_quotas(cfg_.quotas);
  rt_->state_file = std::make_unique<StateFile>(cfg_.state_dir, dir_fd, *rt_->env);
  rt_->state_file->load(*rt_->state, rt_->replies);
}

void Server::stop() noexcept {
  uint64_t one = 1;
  ssize_t r = ::write(wake_fd_, &one, sizeof one);
  (void)r;
}

void Server::leave_when_idle() noexcept {
  uint64_t one = 1;
  ssize_t r = ::write(leave_fd_, &one, sizeof one);
  (void)r;
}

// Sends what the state produced: replies on the socket they came in on,
// requests to coordinators on a connection per coordinator (made on first
// use, closed once the state forgets the coordinator).
void Server::Runtime::deliver() {
  // Connections that ended by now must not get replies: their routing ids
  // may already be someone else's (a client that reconnected sends its
  // request again and is answered on its new connection).
  conns.drain();
  // Connections whose queue filled this round: their later replies are
  // dropped too (a client reads its replies in order).
  std::vector<uint64_t> full;
  for (auto& o : out) {
    // One reply that cannot be sent (a ZeroMQ error, no memory) is lost
    // alone: the rest still go, and out is cleared below.
    event::contained("sending a reply", [&] {
      if (o.error) observe.error_reply(o.error);
      if (!o.link.empty()) {
        links->send(o.link, o.frame);
      } else if (!o.to.from_peer) {
        if (o.to.conn != 0 && !conns.live(o.to.conn)) return;
        const uint64_t bytes = o.held ? o.body.size() : o.frame.size();
        if (std::find(full.begin(), full.end(), o.to.conn) != full.end() ||
            send_reply(router, o) == SendResult::kFull) {
          if (std::find(full.begin(), full.end(), o.to.conn) == full.end()) {
            full.push_back(o.to.conn);
            unread->overflowed(o.to.conn, o.to.routing_id, *state, replies);
          }
          unread->dropped();
        } else if (o.to.conn != 0) {
          unread->sent(o.to.conn, o.to.peer_uid, bytes);
        }
      } else if (peer) {
        send_reply(*peer, o);
      }
    });
  }
  out.clear();
  unread->after_delivery(router, conns, *state, full.size());
  links->prune([&](const std::string& name) { return state->cluster().has_link(name); });
}

namespace {

// The loop serves its sources in this order each round (see run()).
enum Order : int {
  kWake,      // stop(): nothing after it
  kLeave,     // leave_when_idle(): end_round() decides
  kMonitor,   // disconnections, before any request of a reused fd
  kPidFds,    // which processes ended...
  kPidExits,  // ...handled together
  kZap,       // CURVE handshakes
  kPeer,      // requests of other daemons
  kLinks,     // coordinators' answers
  kPermuted,  // sampler permutations the worker finished
  kPidSweep,  // processes without a pidfd
  kLocal,     // local requests: every round, to serve what came meanwhile
};

}  // namespace

void Server::run() {
  auto& rt = *rt_;
  auto& loop = rt.loop;
  auto& state = *rt.state;
  event::SocketEvent wake(loop, kWake, [&] { loop.quit(); });
  wake.schedule_fd(wake_fd_);
  // Only wakes the loop: end_round() then stops it if no job is left.
  event::SocketEvent leave(loop, kLeave, [&] {
    uint64_t n;
    while (::read(leave_fd_, &n, sizeof n) > 0) {
    }
    rt.leave_until = Clock::now() + kLeaveWithin;
  });
  leave.schedule_fd(leave_fd_);
  event::SocketEvent monitor(loop, kMonitor, [&] { rt.conns.drain(); });
  monitor.schedule_socket(rt.conns.events().handle());
  rt.pids.emplace(loop, rt.watch, PidEvents::Orders{kPidFds, kPidExits, kPidSweep},
                  [&](int64_t pid) {
                    state.on_pid_exit(pid, rt.out);
                    rt.cgroups->pid_exited(pid);
                    rt.dirty = true;
                  });
  auto xids = gpu::XidWatch::start(inventory_.nvml);  // GPUs failing: saved for the next daemon
  event::SocketEvent gpu_events(loop, kMonitor, [&] {
    for (const auto& e : xids->take())
      e.lost.empty() ? state.gpu_health().on_xid(e.index, e.xid, rt.out, e.health)
                     : state.gpu_health().on_gpu_lost(e.index, e.lost, rt.out);
    rt.dirty = true;
  });
  if (xids) gpu_events.schedule_fd(xids->fd());
  event::SocketEvent zap(loop, kZap, [&] { rt.zap->handle_ready(); });
  zap.schedule_socket(rt.zap->handle());
  event::SocketEvent peer_events(loop, kMonitor, [&] { rt.fds->drain_peer(); });
  if (rt.fds->peer_events()) peer_events.schedule_socket(rt.fds->peer_events());
  event::SocketEvent peer(loop, kPeer, [&] { rt.receive(*rt.peer, true); });
  if (rt.peer) peer.schedule_socket(rt.peer->handle());
  rt.links.emplace(
      rt.ctx, loop, kLinks, rt.security ? &*rt.security : nullptr,
      [&](const std::string& name, zmq::message_t& frame) {
        // Shared, so that a reply can pass it on without a copy.
        auto held = std::make_shared<zmq::message_t>(std::move(frame));
        state.cluster().on_link_frame(name, held->data(), held->size(), rt.out, held);
      },
      [&](const std::string& name) { state.cluster().link_reconnected(name, rt.out); });
  // Sampler permutations are computed on a worker thread (core/samplers.cpp).
  auto permuter = std::make_unique<PermuteThread>();
  event::SocketEvent permuted(loop, kPermuted, [&] { state.samplers().permutations_done(rt.out); });
  permuted.schedule_fd(permuter->fd());
  state.samplers().set_permuter(std::move(permuter));
  event::SocketEvent local(loop, kLocal, [&] { rt.receive(rt.router, false); });
  local.schedule_socket(rt.router.handle(), true);
  watch_deadlines();
  rt.observe.attach(loop, [&](metrics::Sample& s) {
    const auto now = Clock::now();
    state.reports().fill_metrics(s, now);
    state.cluster().metrics(s, now);
    s.replies_dropped = rt.unread->replies_dropped();
  });
  rt.idle_since = Clock::now();
  loop.set_round_end([&] { end_round(); });
  loop.run();
  state.cancel_all(rt.out);
  // Acknowledgements that never reached the disk are not sent: the clients
  // send those requests again to the next musterd.
  if (rt.dirty && !rt.state_file->save(state, rt.replies) && rt.holding) rt.out.clear();
  rt.deliver();
  log::notice("stopping");
}

}  // namespace muster::daemon
