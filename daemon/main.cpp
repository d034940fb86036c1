#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <iostream>

#include "log.hpp"
#include "log_limit.hpp"
#include "muster/error.hpp"
#include "options.hpp"
#include "server/server.hpp"
#include "systemd/journal.hpp"
#include "systemd/notify.hpp"

namespace {
constexpr uint64_t kLogBurst = 20;
muster::daemon::Server* g_server = nullptr;
extern "C" void on_signal(int) {
  if (g_server) g_server->stop();
}
}  // namespace

int main(int argc, char** argv) {
  // Broadcast chunks (4 MiB frames, made and freed by the dozen per
  // broadcast) come from the heap and go back to it, instead of each being
  // a fresh mapping whose pages the kernel faults in and zeroes (as costly
  // as the copy the chunk is made for). What is freed stays for the next
  // broadcast, up to the trim threshold.
  ::mallopt(M_MMAP_THRESHOLD, 32 << 20);
  ::mallopt(M_TRIM_THRESHOLD, 128 << 20);
  std::optional<muster::daemon::Options> opts;
  try {
    opts = muster::daemon::parse_options(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "musterd: " << e.what() << "\nTry 'musterd --help'.\n";
    return 2;
  }
  if (!opts) return 0;
  if (opts->check_only) {
    std::cout << "musterd: " << opts->check_summary << "\n";
    return 0;
  }
  muster::log::Level lvl;
  muster::log::parse_level(opts->log_level, lvl);
  muster::log::set_level(lvl);
  // Lines of one kind (a job's, shaped alike) past 20 in 10 s are counted
  // and summed up in one line (common/log_limit.hpp): no user's requests
  // can flood the journal past its own rate limit.
  muster::log::set_rate_limit(kLogBurst, std::chrono::seconds(10));
  std::string sink;
  try {
    sink = muster::daemon::systemd::install_log_sink();
  } catch (const std::exception& e) {
    std::cerr << "musterd: " << e.what() << "\n";
    return 2;
  }
  if (!sink.empty()) muster::log::info(sink);
  try {
    muster::daemon::Server server(opts->config);
    server.bind();
    g_server = &server;
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    namespace sd = muster::daemon::systemd;
    muster::daemon::ServiceHooks hooks;
    if (sd::notify_enabled())
      hooks.status_changed = [](const std::string& s) { sd::notify_status(s); };
    // Ping at half the unit's WatchdogSec; nothing when it sets none.
    if (auto wd = sd::watchdog_interval(); wd.count() > 0) {
      hooks.tick = std::max(std::chrono::milliseconds(1),
                            std::chrono::duration_cast<std::chrono::milliseconds>(wd / 2));
      hooks.on_tick = sd::notify_watchdog;
      muster::log::info("watchdog: pinging every " + std::to_string(hooks.tick.count()) + " ms");
    }
    server.set_hooks(std::move(hooks));
    sd::notify_ready();
    server.run();
    muster::log::flush_rate_limit();
    muster::daemon::systemd::notify_stopping();
    g_server = nullptr;
  } catch (const muster::Error& e) {
    std::cerr << "musterd: " << e.what() << "\n";
    return e.code() == muster::ErrorCode::kInvalidArgument ? 2 : 1;
  } catch (const std::exception& e) {
    // Requests never get here (event/boundary.hpp): this is setup or
    // shutdown failing, said in a sentence rather than by abort().
    std::cerr << "musterd: " << e.what() << "\n";
    return 1;
  } catch (...) {
    std::cerr << "musterd: stopped by an exception of unknown type\n";
    return 1;
  }
  return 0;
}
