#include "support/latency.hpp"

#include <algorithm>
#include <memory>
#include <sstream>

#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"
#include "support/as_user.hpp"

namespace muster::test {

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 1e9;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p / 100 * v.size()))];
}

}  // namespace

std::string LatencyProbe::Result::line() const {
  std::ostringstream o;
  o << "p99 " << p99_ms << " ms, p50 " << p50_ms << " ms, " << n << " pings, " << unanswered
    << " unanswered";
  return o.str();
}

LatencyProbe::LatencyProbe(std::string endpoint, bool fresh_connections)
    : endpoint_(std::move(endpoint)), fresh_(fresh_connections), thread_([this] { run(); }) {}

LatencyProbe::~LatencyProbe() {
  stop();
}

void LatencyProbe::run() {
  using namespace std::chrono_literals;
  std::unique_ptr<RawClient> kept;
  for (uint64_t id = 1; !stop_.load(); ++id) {
    auto t0 = std::chrono::steady_clock::now();
    if (fresh_ || !kept) kept = std::make_unique<RawClient>(endpoint_, "", 10ms);
    if (kept->ask(proto::encode(id, proto::Ping{}), 2s).rfind("reply=pong", 0) != 0) {
      ++unanswered_;
      kept.reset();  // a late reply must not answer the next ping
    }
    ms_.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(5ms);  // a client's pace, not a flood of its own
  }
}

LatencyProbe::Result LatencyProbe::stop() {
  if (!stopped_) {
    stopped_ = true;
    stop_ = true;
    thread_.join();
  }
  return {percentile(ms_, 99), percentile(ms_, 50), ms_.size(), unanswered_};
}

}  // namespace muster::test
