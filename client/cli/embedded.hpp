// A musterd inside `muster run`, for machines where no daemon runs: it binds
// the same socket a system daemon would, so `muster status` sees it.
#pragma once

#include <memory>
#include <string>
#include <thread>

namespace muster::daemon {
class Server;
}

namespace muster::cli {

class EmbeddedDaemon {
 public:
  EmbeddedDaemon(const std::string& runtime_dir, int simulate_gpus);
  ~EmbeddedDaemon();
  EmbeddedDaemon(const EmbeddedDaemon&) = delete;
  EmbeddedDaemon& operator=(const EmbeddedDaemon&) = delete;

 private:
  std::unique_ptr<daemon::Server> server_;
  std::thread thread_;
};

// nullptr when a daemon already answers at endpoint; else an embedded one.
// Throws muster::Error when neither works.
std::unique_ptr<EmbeddedDaemon> ensure_daemon(const std::string& endpoint, int simulate_gpus);

}  // namespace muster::cli
