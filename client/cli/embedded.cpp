#include "cli/embedded.hpp"

#include <sys/stat.h>

#include <cstdlib>

#include "endpoint.hpp"
#include "log.hpp"
#include "muster/client.hpp"
#include "server/server.hpp"

namespace muster::cli {

EmbeddedDaemon::EmbeddedDaemon(const std::string& runtime_dir, int simulate_gpus) {
  daemon::Config cfg;
  cfg.runtime_dir = runtime_dir;
  cfg.simulate_gpus = simulate_gpus;
  server_ = std::make_unique<daemon::Server>(cfg);
  server_->bind();
  thread_ = std::thread([this] { server_->run(); });
}

EmbeddedDaemon::~EmbeddedDaemon() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

namespace {
bool answers(const std::string& endpoint) {
  // No socket file, no daemon: skip the ping's timeout.
  auto dir = ipc_dir_of(endpoint);
  struct stat st {};
  if (!dir.empty() && ::stat(endpoint.substr(6).c_str(), &st) != 0) return false;
  try {
    Client c({endpoint, std::chrono::milliseconds(500)});
    c.ping();
    return true;
  } catch (const Error&) {
    return false;
  }
}
}  // namespace

std::unique_ptr<EmbeddedDaemon> ensure_daemon(const std::string& endpoint, int simulate_gpus) {
  if (answers(endpoint)) return nullptr;
  auto dir = ipc_dir_of(endpoint);
  if (dir.empty() || endpoint != endpoint_for_dir(dir))
    throw Error(ErrorCode::kUnavailable,
                "no musterd answers at " + endpoint +
                    ", and an embedded daemon can only serve an ipc://DIR/musterd.sock endpoint");
  // The embedded daemon logs only what matters to the user of muster run.
  log::Level lvl = log::Level::kWarning;
  if (const char* l = std::getenv("MUSTER_LOG_LEVEL")) log::parse_level(l, lvl);
  log::set_level(lvl);
  for (int attempt = 0; attempt < 50; ++attempt) {
    try {
      return std::make_unique<EmbeddedDaemon>(dir, simulate_gpus);
    } catch (const Error& e) {
      // Another launcher is starting its own daemon here: use that one.
      if (e.code() != ErrorCode::kConflict) throw;
      if (answers(endpoint)) return nullptr;
    }
  }
  throw Error(ErrorCode::kUnavailable,
              "a musterd holds " + dir + " but does not answer at " + endpoint);
}

}  // namespace muster::cli
