// The daemon: a ZeroMQ ROUTER on the ipc:// socket (and, when peering, a
// TCP one), served together with the pidfds of watched processes, a
// wake-up eventfd and the sampler permutation worker's eventfd
// (permute_thread.hpp) in one event loop (event/loop.hpp).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "env/env.hpp"
#include "gpu/inventory.hpp"
#include "server/config.hpp"

namespace muster::daemon {

// What the loop tells the service manager, through daemon/systemd/ (which
// main() wires in); the loop itself knows nothing of systemd.
struct ServiceHooks {
  // Called with a one-line summary (jobs, leases, ranks) once at start and
  // whenever it changes. Empty = never computed.
  std::function<void(const std::string&)> status_changed;
  // Called every `tick` while the loop runs (the watchdog); zero = never.
  std::chrono::milliseconds tick{0};
  std::function<void()> on_tick;
};

class Server {
 public:
  // Discovers GPUs and validates the config; throws Error on bad values.
  // The state directory is written, and its saves timed, through env
  // (env/env.hpp), which must outlive the server: a test's disk that fails.
  explicit Server(Config cfg, Env& env = Env::posix());
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Takes the runtime directory's lock and binds the socket. Throws Error
  // (kConflict when another daemon holds the directory).
  void bind();
  // Runs until stop(); then fails pending waits and removes the socket.
  // Called once.
  void run();
  // Safe from any thread and from a signal handler.
  void stop() noexcept;
  // exit_when_idle: stop as soon as no job is left, not kIdleAfterJob after
  // (the launcher that started this daemon will start no more workers).
  // Safe from any thread and from a signal handler.
  void leave_when_idle() noexcept;
  // Set before run().
  void set_hooks(ServiceHooks hooks) { hooks_ = std::move(hooks); }

  const std::string& endpoint() const { return endpoint_; }
  // tcp://ADDR:PORT other daemons reach us on; empty without peer_bind.
  const std::string& peer_endpoint() const { return peer_endpoint_; }
  const gpu::Inventory& inventory() const { return inventory_; }
  const std::vector<gpu::Device>& allowed() const { return allowed_; }

 private:
  void bind_peer();
  // Raises the fd limit and makes the guard that keeps below it.
  void start_fd_guard();
  // The caps per uid and per peer address, and the ZAP handler that
  // enforces them; before the sockets bind.
  void start_admission();
  // How long a connection may take to finish its handshake, and a plain
  // TCP peer to send its first peer request (ZMQ_HANDSHAKE_IVL; libzmq's
  // default is 30 s).
  static constexpr int kHandshakeMs = 5000;
  // How long an embedded daemon (exit_when_idle) stays once its last job
  // ended, unless the launcher that started it released it (it starts no
  // more workers, and waits for its daemon to exit: so much less on every
  // run). A restart (muster run's reserve retries) or a later run that
  // finds it gone starts another, which loads the state it saved.
  static constexpr std::chrono::milliseconds kIdleAfterJob{200};
  // How long leave_when_idle() waits for the last job to end.
  static constexpr std::chrono::milliseconds kLeaveWithin{1000};
  // Backlog and handshake limits of a listening ROUTER; before bind.
  static void limit_listener(zmq::socket_t& s);
  // Locks the state dir (when it is not the runtime dir) and restores it.
  void load_state();
  // run()'s parts: what bounds the loop's wait, and each round's end.
  void watch_deadlines();
  void end_round();

  // What a bound server runs on: its sockets, the job state they serve and
  // the file that keeps it.
  struct Runtime;
  std::unique_ptr<Runtime> rt_;
  Config cfg_;
  gpu::Inventory inventory_;
  std::vector<gpu::Device> allowed_;
  std::string endpoint_;
  std::string peer_endpoint_;
  ServiceHooks hooks_;
  int wake_fd_ = -1;
  int leave_fd_ = -1;  // leave_when_idle()'s eventfd
  int lock_fd_ = -1;
};

}  // namespace muster::daemon
