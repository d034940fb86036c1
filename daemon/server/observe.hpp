// What the server shows the people who run the node (doc/operating.md,
// "Watching the node"): the Prometheus exporter (--metrics-listen), fed from the loop
// by a snapshot published every second, and dcgm-exporter's job mapping
// files (--job-mapping-dir), kept in step with the leases at the end of
// each round. Both are off unless configured; the request path's counting
// is two clock reads and a few array increments, and only when the
// exporter runs.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/devices.hpp"
#include "event/loop.hpp"
#include "metrics/http.hpp"
#include "metrics/job_mapping.hpp"
#include "metrics/sample.hpp"
#include "server/config.hpp"

namespace muster::daemon {

class Observer {
 public:
  using Clock = std::chrono::steady_clock;
  using Fill = std::function<void(metrics::Sample&)>;
  static constexpr std::chrono::seconds kPublishEvery{1};

  Observer() = default;
  ~Observer();
  Observer(const Observer&) = delete;
  Observer& operator=(const Observer&) = delete;

  // Listens (writing ADDR:PORT to <runtime dir>/metrics-endpoint, for
  // scripts that asked for port 0) and opens the mapping directory, as the
  // config says. Throws Error when the exporter cannot listen.
  void start(const Config& cfg);
  // Publishes now and then every kPublishEvery on the loop; fill adds the
  // state's part of each sample.
  void attach(event::Loop& loop, Fill fill);

  // The request path (intake.cpp, Runtime::deliver).
  void request(uint16_t type, Clock::duration took) {
    if (requests_) requests_->request(type, took);
  }
  void error_reply(uint16_t code) {
    if (requests_) requests_->error(code);
  }
  bool counting() const { return requests_ != nullptr; }
  // The state file: each save, and changes refused (or let in) for room.
  void saved(bool ok, Clock::duration took, const std::string& why);
  void storage_refused(const std::string& why);
  void storage_room() { storage_problem_.clear(); }
  // The GPUs' holders now, for the mapping files.
  void leases(const std::vector<DeviceSlot>& slots);

 private:
  void publish();

  std::unique_ptr<metrics::RequestStats> requests_;  // set while an exporter runs
  metrics::SaveStats saves_;
  std::string storage_problem_;  // why the state cannot be saved; "" = it can
  std::unique_ptr<metrics::Exporter> exporter_;
  std::string endpoint_file_;
  std::optional<metrics::JobMapping> mapping_;
  std::unique_ptr<event::TimerEvent> timer_;
  Fill fill_;
  static constexpr size_t kRememberJobs = 4096;
  std::map<std::string, uint64_t> generations_;  // by job, as last published
  uint64_t restarts_ = 0;
};

}  // namespace muster::daemon
