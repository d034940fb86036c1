#include "cli/rendezvous_wait.hpp"

#include <signal.h>
#include <string.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/supervisor.hpp"
#include "muster/client.hpp"

namespace muster::cli {

namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kProgressEvery = std::chrono::seconds(5);

// The rendezvous thread's result, shared with the waiting one (which may
// leave without it).
struct Pending {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::optional<muster::World> world;
  std::exception_ptr error;
};

std::string what_forms_it(const muster::RendezvousOptions& o) {
  std::string n = std::to_string(o.max_nodes) + " nodes";
  if (o.min_nodes == o.max_nodes) return "forms at " + n;
  return "forms at " + n + ", or at " + std::to_string(o.min_nodes) + " after a last call of " +
         std::to_string(o.last_call.count() / 1000) + " s";
}

// This node's daemon's word on the job, if it has one.
std::optional<muster::JobState> daemon_view(const std::string& endpoint, const std::string& job) {
  try {
    Client c({endpoint});
    return muster::cluster_state(c, job);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// Who joined the round, as the coordinator said (the nodes by name); before
// its first word, what this node's daemon knows.
std::string progress(const std::optional<muster::JobState>& s, const muster::RendezvousOptions& o,
                     std::chrono::seconds waited) {
  std::string of_timeout =
      std::to_string(waited.count()) + " s of " + std::to_string(o.timeout.count() / 1000) + " s";
  if (s && s->forming.max_nodes > 0) return to_string(s->forming) + " (waited " + of_timeout + ")";
  std::string view = !s ? "" : s->message.empty() ? s->state : s->state + ": " + s->message;
  return "still waiting after " + of_timeout + "; " + what_forms_it(o) +
         (view.empty() ? "" : " (this node: " + view + ")");
}

}  // namespace

muster::World wait_for_world(const std::string& endpoint, const std::string& job,
                             const muster::RendezvousOptions& options, const char* name) {
  auto pending = std::make_shared<Pending>();
  std::thread([pending, endpoint, job, options] {
    std::optional<muster::World> world;
    std::exception_ptr error;
    try {
      Client c({endpoint});
      world = muster::rendezvous(c, job, options);
    } catch (...) {
      error = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(pending->m);
    pending->world = world;
    pending->error = error;
    pending->done = true;
    pending->cv.notify_all();
  }).detach();
  std::cerr << name << ": rendezvous " << job << ": joining through " << options.coordinator << " ("
            << what_forms_it(options) << ")\n";
  auto start = Clock::now();
  auto next_progress = start + kProgressEvery;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(pending->m);
      if (pending->cv.wait_for(lock, std::chrono::milliseconds(200),
                               [&] { return pending->done; })) {
        if (pending->error) std::rethrow_exception(pending->error);
        return *pending->world;
      }
    }
    if (int sig = take_pending_stop_signal()) {
      std::cerr << name << ": SIG" << sigabbrev_np(sig)
                << ": stopped waiting for the rendezvous of " << job << "; no worker was started\n";
      std::_Exit(128 + sig);  // the rendezvous thread is still in its call
    }
    if (Clock::now() >= next_progress) {
      next_progress += kProgressEvery;
      auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start);
      std::cerr << name << ": rendezvous " << job << ": "
                << progress(daemon_view(endpoint, job), options, waited) << "\n";
    }
  }
}

}  // namespace muster::cli
