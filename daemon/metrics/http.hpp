// The HTTP side of the metrics: /metrics and /healthz served by
// libmicrohttpd on its own thread, from the last snapshot the event loop
// published. That thread never touches the daemon's state: it reads one
// immutable Published under a mutex. A client that connects and never
// reads or sends holds one of a few connection slots for at most the
// connection timeout; the loop never waits for the HTTP side.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "metrics/address.hpp"

namespace muster::daemon::metrics {

struct Published {
  std::string text;                            // the exposition (render.hpp)
  std::chrono::steady_clock::time_point at{};  // when the loop made it
  std::string unhealthy;                       // why the state cannot be saved; "" = it can
};

class Exporter {
 public:
  // /healthz is 503 once the loop has published nothing for this long.
  static constexpr std::chrono::seconds kStaleAfter{5};
  static constexpr unsigned kMaxConnections = 32;
  static constexpr unsigned kConnectionTimeoutS = 10;

  // Listens on `where`. Throws Error (kInternal) when it cannot, and
  // (kInvalidArgument) in a build without libmicrohttpd.
  explicit Exporter(const ListenAddress& where);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // The port it listens on (the one given, or the one picked for 0).
  uint16_t port() const { return port_; }
  // Safe from any thread; the loop calls it.
  void publish(std::shared_ptr<const Published> p);
  std::shared_ptr<const Published> current() const;

  // What /healthz answers for p at `now`: "" when healthy, else why not.
  static std::string health(const Published* p, std::chrono::steady_clock::time_point now);

 private:
  struct Daemon;
  std::unique_ptr<Daemon> d_;
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::shared_ptr<const Published> current_;
};

}  // namespace muster::daemon::metrics
