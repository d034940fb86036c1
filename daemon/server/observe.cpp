#include "server/observe.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "log.hpp"
#include "metrics/address.hpp"
#include "muster/error.hpp"

namespace muster::daemon {

Observer::~Observer() {
  if (!endpoint_file_.empty()) ::unlink(endpoint_file_.c_str());
}

void Observer::start(const Config& cfg) {
  if (!cfg.job_mapping_dir.empty()) {
    mapping_.emplace(cfg.job_mapping_dir);
    log::notice("job mapping for dcgm-exporter in " + cfg.job_mapping_dir +
                " (a file per GPU holding its job id: readable by all who can read that "
                "directory)");
  }
  if (cfg.metrics_listen.empty()) return;
  metrics::ListenAddress where;
  try {
    where = metrics::parse_listen_address(cfg.metrics_listen);
  } catch (const std::exception& e) {
    throw Error(ErrorCode::kInvalidArgument, e.what());
  }
  exporter_ = std::make_unique<metrics::Exporter>(where);
  requests_ = std::make_unique<metrics::RequestStats>();
  std::string host = cfg.metrics_listen.substr(0, cfg.metrics_listen.rfind(':'));
  std::string endpoint = host + ":" + std::to_string(exporter_->port());
  endpoint_file_ = cfg.runtime_dir + "/metrics-endpoint";
  std::ofstream(endpoint_file_) << endpoint << "\n";
  log::notice("serving metrics on http://" + endpoint + "/metrics and /healthz");
}

void Observer::attach(event::Loop& loop, Fill fill) {
  if (!exporter_) return;
  fill_ = std::move(fill);
  timer_ = std::make_unique<event::TimerEvent>(loop, [this] {
    publish();
    timer_->schedule(Clock::now() + kPublishEvery);
  });
  timer_->schedule(Clock::now());
}

void Observer::saved(bool ok, Clock::duration took, const std::string& why) {
  saves_.latency.observe(metrics::SaveStats::kLatencyBounds,
                         std::chrono::duration<double>(took).count());
  if (ok) {
    storage_problem_.clear();
    return;
  }
  ++saves_.failures;
  storage_problem_ = why;
}

void Observer::storage_refused(const std::string& why) {
  ++saves_.refused;
  storage_problem_ = why;
}

void Observer::leases(const std::vector<DeviceSlot>& slots) {
  if (!mapping_) return;
  for (const auto& d : slots) mapping_->set(d.device.index, d.job);
}

void Observer::publish() {
  metrics::Sample s;
  fill_(s);
  // Restarts: a job seen again under a later generation (also after it was
  // gone a moment between two generations: ended jobs are remembered, up
  // to a bound).
  for (const auto& j : s.jobs) {
    auto [it, fresh] = generations_.emplace(j.id, j.generation);
    if (!fresh && j.generation > it->second) restarts_ += j.generation - it->second;
    it->second = j.generation;
  }
  if (generations_.size() > kRememberJobs)
    std::erase_if(generations_, [&](const auto& g) {
      return std::none_of(s.jobs.begin(), s.jobs.end(),
                          [&](const metrics::JobSample& j) { return j.id == g.first; });
    });
  s.restarts = restarts_;
  auto p = std::make_shared<metrics::Published>();
  p->text = metrics::render(s, *requests_, saves_);
  p->at = Clock::now();
  p->unhealthy = storage_problem_;
  exporter_->publish(std::move(p));
}

}  // namespace muster::daemon
