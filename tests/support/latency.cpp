#include "support/latency.hpp"

#include <algorithm>
#include <memory>
#include <sstream>
#include <zmq.hpp>

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

// One ZeroMQ context for the probe's life, as a client process has; a new
// DEALER (a new connection) per ping, or one kept. (A context per ping
// starts two threads each time: under load that cost the probe itself up
// to 130 ms, which is not the daemon's.)
void LatencyProbe::run() {
  using namespace std::chrono_literals;
  zmq::context_t ctx;
  std::unique_ptr<zmq::socket_t> s;
  for (uint64_t id = 1; !stop_.load(); ++id) {
    auto t0 = std::chrono::steady_clock::now();
    if (fresh_ || !s) {
      s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
      s->set(zmq::sockopt::linger, 0);
      s->set(zmq::sockopt::reconnect_ivl, 10);  // as libmuster's
      s->connect(endpoint_);
    }
    const std::string frame = proto::encode(id, proto::Ping{});
    s->send(zmq::buffer(frame), zmq::send_flags::none);
    zmq::pollitem_t item{s->handle(), 0, ZMQ_POLLIN, 0};
    zmq::message_t reply;
    bool pong = zmq::poll(&item, 1, 2s) > 0 && s->recv(reply, zmq::recv_flags::dontwait) &&
                describe(reply.to_string()).rfind("reply=pong", 0) == 0;
    if (!pong) {
      ++unanswered_;
      s.reset();  // a late reply must not answer the next ping
    }
    ms_.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    ++count_;
    if (fresh_) s.reset();
    std::this_thread::sleep_for(5ms);  // a client's pace, not a flood of its own
  }
}

LatencyProbe::Result LatencyProbe::stop(size_t at_least) {
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!stopped_ && count_.load() < at_least && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!stopped_) {
    stopped_ = true;
    stop_ = true;
    thread_.join();
  }
  return {percentile(ms_, 99), percentile(ms_, 50), ms_.size(), unanswered_};
}

}  // namespace muster::test
