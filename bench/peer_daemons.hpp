// Peer daemons for the multi-node benchmarks (bench_scale, bench_swarm):
// a musterd in a runtime directory of its own, peering in plain TCP on
// loopback, and the few helpers around it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "muster/client.hpp"

namespace muster::bench {

using std::chrono::milliseconds;

// Many connections (node daemons, swarm nodes) need many descriptors.
inline void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  rlim_t want = rl.rlim_max == RLIM_INFINITY ? 65536 : rl.rlim_max;
  if (rl.rlim_cur < want) {
    rl.rlim_cur = want;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("cannot find a free port");
  close(fd);
  return ntohs(a.sin_port);
}

// A musterd in a runtime directory of its own (under base), stopped by
// the destructor.
class Daemon {
 public:
  // peer_timeout: --peer-timeout in seconds (heartbeats go every quarter of it).
  Daemon(const std::string& musterd, const std::string& dir, std::vector<std::string> args,
         const std::string& peer_timeout = "30")
      : dir_(dir), endpoint_("ipc://" + dir + "/musterd.sock") {
    std::filesystem::create_directories(dir);
    // MUSTER_BENCH_LOG_LEVEL: what the daemons log (default error), to see
    // why a run stalls.
    const char* level = std::getenv("MUSTER_BENCH_LOG_LEVEL");
    std::vector<std::string> argv = {musterd,        "--runtime-dir",         dir,
                                     "--log-level",  level ? level : "error", "--no-config",
                                     "--peer-plain", "--peer-timeout",        peer_timeout};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> a;
      for (auto& s : argv) a.push_back(s.data());
      a.push_back(nullptr);
      execv(a[0], a.data());
      _exit(127);
    }
    if (pid_ < 0) throw std::runtime_error("fork failed");
  }
  ~Daemon() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  void wait_ready() const {
    for (int i = 0; i < 400; ++i) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_)
        throw std::runtime_error("musterd in " + dir_ + " exited at start (status " +
                                 std::to_string(status) + ")");
      try {
        if (std::filesystem::exists(dir_ + "/musterd.sock")) {
          muster::Client({endpoint_, milliseconds(500)}).ping();
          return;
        }
      } catch (const muster::Error&) {
      }
      std::this_thread::sleep_for(milliseconds(25));
    }
    throw std::runtime_error("musterd in " + dir_ + " did not start");
  }
  const std::string& endpoint() const { return endpoint_; }
  pid_t pid() const { return pid_; }
  // Where it takes peers (tcp://host:port), as it wrote it once listening.
  std::string peer_endpoint() const {
    std::string ep;
    for (int i = 0; i < 400 && ep.empty(); ++i) {
      std::ifstream(dir_ + "/peer-endpoint") >> ep;
      if (ep.empty()) std::this_thread::sleep_for(milliseconds(25));
    }
    if (ep.empty()) throw std::runtime_error("musterd in " + dir_ + " wrote no peer-endpoint");
    return ep;
  }

 private:
  std::string dir_, endpoint_;
  pid_t pid_ = -1;
};

inline uint64_t peer_requests(const Daemon& d) {
  return muster::Client({d.endpoint()}).status().peer_requests;
}

// Waits until the daemon's peer request count stays put for `quiet`.
inline uint64_t settle(const Daemon& d, milliseconds quiet = milliseconds(150)) {
  uint64_t last = peer_requests(d);
  for (int i = 0; i < 100; ++i) {
    std::this_thread::sleep_for(quiet);
    uint64_t now = peer_requests(d);
    if (now == last) return now;
    last = now;
  }
  return last;
}

// Runtime directories under /dev/shm when it exists: daemons save their
// state with fsync before answering, which tmpfs keeps cheap, as /run does.
inline std::string runtime_base(const std::string& name = "muster-scale") {
  std::string parent = std::filesystem::is_directory("/dev/shm")
                           ? "/dev/shm"
                           : std::filesystem::temp_directory_path().string();
  std::string tmpl = parent + "/" + name + "-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp in " + parent + " failed");
  return tmpl;
}

// A gate that threads wait at until it opens.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  void wait() {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return open; });
  }
  void release() {
    {
      std::lock_guard lk(m);
      open = true;
    }
    cv.notify_all();
  }
};

}  // namespace muster::bench
