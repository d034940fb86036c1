// Process exits as loop events: a source per pidfd PidWatch holds, and the
// periodic /proc sweep for pids it has no pidfd for.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "event/loop.hpp"
#include "liveness/pidwatch.hpp"

namespace muster::daemon {

class PidEvents {
 public:
  using OnExit = std::function<void(int64_t pid)>;
  struct Orders {
    int fds;    // the pidfds: they only note which pids ended...
    int exits;  // ...and this step reports them, all pidfds read first
    int sweep;  // the /proc sweep
  };
  // Follows watch from now on (its listener); reports each ended pid.
  PidEvents(event::Loop& loop, PidWatch& watch, Orders orders, OnExit on_exit);
  ~PidEvents();
  PidEvents(const PidEvents&) = delete;
  PidEvents& operator=(const PidEvents&) = delete;

 private:
  void opened(int64_t pid, int fd);
  void report();

  event::Loop& loop_;
  PidWatch& watch_;
  Orders orders_;
  OnExit on_exit_;
  std::map<int64_t, event::SocketEvent> fds_;
  // The pids whose pidfd was readable this round. Reported together, in
  // pid order, after every pidfd is read: a pid that another's exit made
  // the state unwatch is still reported.
  std::vector<int64_t> ended_;
  event::SocketEvent exits_;
  event::SocketEvent sweep_;
};

}  // namespace muster::daemon
