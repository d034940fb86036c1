// What /healthz says, and the snapshot it says it of; the same with and
// without libmicrohttpd (unit tests call health() directly).
#include "metrics/http.hpp"

namespace muster::daemon::metrics {

void Exporter::publish(std::shared_ptr<const Published> p) {
  std::lock_guard lock(mu_);
  current_ = std::move(p);
}

std::shared_ptr<const Published> Exporter::current() const {
  std::lock_guard lock(mu_);
  return current_;
}

std::string Exporter::health(const Published* p, std::chrono::steady_clock::time_point now) {
  if (!p) return "musterd's event loop has published no metrics yet";
  auto age = std::chrono::duration_cast<std::chrono::seconds>(now - p->at);
  if (age >= kStaleAfter)
    return "musterd's event loop has not turned for " + std::to_string(age.count()) + " s";
  if (!p->unhealthy.empty()) return "musterd cannot save its state: " + p->unhealthy;
  return "";
}

}  // namespace muster::daemon::metrics
