// The daemon's one event loop: a ZeroMQ ROUTER on the ipc:// socket, the
// pidfds of watched processes and a wake-up eventfd, all in one poll.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gpu/inventory.hpp"

namespace zmq {
class socket_t;
}

namespace muster::daemon {

class State;
struct Outgoing;

struct Config {
  std::string runtime_dir;  // where musterd.sock and musterd.lock live
  // Where state.msgpack (jobs, leases, stores; persist/state_file.hpp)
  // lives; empty = runtime_dir, which is tmpfs under /run: the state
  // survives a daemon restart but not a reboot.
  std::string state_dir;
  std::vector<int64_t> devices;  // allowed subset; empty = all discovered
  bool devices_given = false;
  int simulate_gpus = -1;
  // An embedded daemon (started by muster run) ends once it has had no job
  // for a moment, so it outlives its launcher only while others use it.
  bool exit_when_idle = false;
  // Group that may use the socket (chown to it, mode 0660); -1 = leave it.
  int64_t socket_gid = -1;

  // Peering with other daemons (multi-node jobs). Listening on the network
  // is opt-in: no listener while peer_bind is empty; outgoing links to a
  // job's coordinator work either way. Port 0 = any free port (tests).
  std::string peer_bind;
  int peer_port = 29400;
  // A peer silent for this long is lost (heartbeats every quarter of it).
  std::chrono::milliseconds peer_timeout{10000};
  // CURVE between daemons. Unencrypted peering only when peer_plain is set
  // explicitly; otherwise a key pair is required to peer at all.
  bool peer_plain = false;
  std::string peer_public_key;  // Z85, 40 characters
  std::string peer_secret_key;  // Z85, 40 characters
  // Public keys (Z85) of daemons allowed to connect to us; our own is
  // always allowed (one key pair shared by a cluster is the simple setup).
  std::vector<std::string> peer_authorized_keys;
  // The public key we expect of the daemons we connect to; empty = ours.
  std::string peer_server_key;
  // Children per daemon in the relay tree of the jobs we coordinate; a job
  // of at most this many nodes is a flat star. 0 = always a star.
  uint32_t tree_width = 16;
};

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
  explicit Server(Config cfg);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Takes the runtime directory's lock and binds the socket. Throws Error
  // (kConflict when another daemon holds the directory).
  void bind();
  // Runs until stop(); then fails pending waits and removes the socket.
  void run();
  // Safe from any thread and from a signal handler.
  void stop() noexcept;
  // Set before run().
  void set_hooks(ServiceHooks hooks) { hooks_ = std::move(hooks); }

  const std::string& endpoint() const { return endpoint_; }
  // tcp://ADDR:PORT other daemons reach us on; empty without peer_bind.
  const std::string& peer_endpoint() const { return peer_endpoint_; }
  const gpu::Inventory& inventory() const { return inventory_; }
  const std::vector<gpu::Device>& allowed() const { return allowed_; }

 private:
  void bind_peer();
  void receive(zmq::socket_t& sock, bool from_peer, State& state, std::vector<Outgoing>& out);
  // Sends out's frames, taking the large ones (out is cleared after).
  void deliver(std::vector<Outgoing>& out);
  // Locks the state dir (when it is not the runtime dir) and restores it.
  void load_state();

  struct Impl;
  std::unique_ptr<Impl> impl_;
  Config cfg_;
  gpu::Inventory inventory_;
  std::vector<gpu::Device> allowed_;
  std::string endpoint_;
  std::string peer_endpoint_;
  ServiceHooks hooks_;
  int wake_fd_ = -1;
  int lock_fd_ = -1;
};

}  // namespace muster::daemon
