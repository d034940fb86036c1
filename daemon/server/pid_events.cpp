#include "server/pid_events.hpp"

#include <algorithm>
#include <tuple>
#include <utility>

namespace muster::daemon {

PidEvents::PidEvents(event::Loop& loop, PidWatch& watch, Orders orders, OnExit on_exit)
    : loop_(loop),
      watch_(watch),
      orders_(orders),
      on_exit_(std::move(on_exit)),
      exits_(loop, orders.exits, [this] { report(); }),
      sweep_(loop, orders.sweep, [this] {
        for (auto pid : watch_.sweep_dead()) on_exit_(pid);
      }) {
  exits_.schedule_step();
  sweep_.schedule_step();
  // Without pidfds, a few pids are checked in /proc five times a second.
  loop.add_wake_hint([this] { return watch_.needs_sweep() ? 200L : -1L; });
  watch_.set_listener([this](int64_t pid, int fd, bool open) {
    if (open)
      opened(pid, fd);
    else
      fds_.erase(pid);  // before PidWatch closes the fd
  });
}

PidEvents::~PidEvents() {
  watch_.set_listener(nullptr);
}

void PidEvents::opened(int64_t pid, int fd) {
  auto [it, fresh] = fds_.emplace(
      std::piecewise_construct, std::forward_as_tuple(pid),
      std::forward_as_tuple(loop_, orders_.fds, [this, pid] { ended_.push_back(pid); }));
  it->second.schedule_fd(fd);
}

void PidEvents::report() {
  if (ended_.empty()) return;
  std::sort(ended_.begin(), ended_.end());
  for (auto pid : ended_) on_exit_(pid);
  ended_.clear();
}

}  // namespace muster::daemon
