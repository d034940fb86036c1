// The HTTP side of the metrics: /metrics and /healthz served by
// libmicrohttpd on its own thread, from the last snapshot the event loop
// published. That thread never touches the daemon's state: it reads one
// immutable Published under a mutex. Monitoring cannot be held: every
// request ends within kRequestDeadline of its first byte however slowly
// its bytes come (a slowloris renews an idle timeout with each byte), an
// address holds at most kMaxPerAddress connections, and a new connection
// past either limit evicts the oldest one whose request is still
// incomplete; the loop never waits for the HTTP side.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "metrics/address.hpp"

struct MHD_Connection;

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
  static constexpr unsigned kMaxPerAddress = 16;
  static constexpr unsigned kConnectionTimeoutS = 10;
  static constexpr std::chrono::seconds kRequestDeadline{5};

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

  // The connections libmicrohttpd serves, as the limits see them (http.cpp).
  struct Daemon;
  // The head of c's request came (its request is no longer incomplete).
  void headers_came(MHD_Connection* c) const;

 private:
  std::unique_ptr<Daemon> d_;
  uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::shared_ptr<const Published> current_;
};

}  // namespace muster::daemon::metrics
