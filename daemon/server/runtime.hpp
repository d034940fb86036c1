// Inside Server (server.hpp): what a bound server runs on, and the loop's
// steps over it. Only the server's own files include this.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "contain/job_cgroups.hpp"
#include "core/state.hpp"
#include "event/loop.hpp"
#include "liveness/pidwatch.hpp"
#include "peer/secure.hpp"
#include "peer/zap_handler.hpp"
#include "persist/reply_cache.hpp"
#include "persist/state_file.hpp"
#include "server/conn_caps.hpp"
#include "server/connections.hpp"
#include "server/fd_guard.hpp"
#include "server/observe.hpp"
#include "server/peer_links.hpp"
#include "server/pid_events.hpp"
#include "server/server.hpp"
#include "server/unread.hpp"
#include "server/user_sockets.hpp"

namespace muster::daemon {

struct Server::Runtime {
  zmq::context_t ctx = make_daemon_context();
  zmq::socket_t router{ctx, zmq::socket_type::router};
  ClientConnections conns{ctx};
  PidWatch watch;
  std::unique_ptr<State> state;
  std::string socket_path;
  // Each user's own socket beside it (made by bind()).
  std::optional<UserSockets> user_sockets;
  // Peering: our listener (when peer_bind is set).
  std::optional<peer::Security> security;
  // Admits every connection of both listeners (CURVE keys, the caps).
  std::unique_ptr<peer::ZapHandler> zap;
  std::optional<ConnCaps> caps;
  std::optional<zmq::socket_t> peer;
  std::string peer_endpoint_file;
  // New connections wait near the fd limit (made by bind()).
  std::optional<FdGuard> fds;
  // Clients that read none of their replies (made by bind(), with
  // --reply-queue; unread.hpp).
  std::optional<UnreadClients> unread;
  ReplyCache replies;
  Env* env = &Env::posix();  // the state file's disk, and the clock its saves are timed by
  std::unique_ptr<StateFile> state_file;
  int state_lock_fd = -1;  // when the state dir is not the runtime dir
  // The jobs' cgroups (or the note that there are none), made once the
  // runtime dir is ours.
  std::unique_ptr<contain::JobCgroups> cgroups;

  // The loop and what only it uses (made by run()).
  event::Loop loop;
  std::optional<PeerLinks> links;
  std::optional<PidEvents> pids;
  std::unique_ptr<event::TimerEvent> watchdog;
  // Metrics and job mapping (observe.hpp); after the loop, whose timer it
  // holds.
  Observer observe;
  std::vector<Outgoing> out;  // what this round produced
  bool dirty = true;          // something to save before the next replies go out
  // A save failed after changes were acknowledged in memory (an I/O error
  // the reservation could not foresee): every reply waits until one works.
  bool holding = false;
  std::string last_status;  // the service manager's, as last told
  bool had_job = false;     // exit_when_idle: whether a job ever ran
  // Server::leave_when_idle(): no lingering if the last job ends by then
  // (a job that outlasts it is another launcher's, whose restarts the
  // linger is for).
  std::optional<Clock::time_point> leave_until;
  Clock::time_point idle_since;

  // Reads up to a bounded batch of requests from a ROUTER (the local socket
  // or the peer one) so that pid exits and timeouts are never starved.
  void receive(zmq::socket_t& sock, bool from_peer);
  // Sends out's frames, taking the large ones; out is cleared after.
  void deliver();
  // The end of a round: saves what changed, then delivers (durable.cpp).
  void save_then_deliver();

 private:
  // One request, framed as [routing id, (empty,) body].
  void take(std::vector<zmq::message_t>& frames, bool from_peer);
  // A local request seen before: answered from the reply cache (true), or
  // new (false); the cache starts tracking a new one.
  bool answered(ReplyTo& to, const zmq::message_t& body, uint16_t type);
  // Counts a plain TCP peer as one once it sent a peer request.
  void note_peer(const zmq::message_t& body, uint16_t type);
  static uint16_t peer_cache_type(const proto::Envelope& env);
};

}  // namespace muster::daemon
