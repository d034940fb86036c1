// The daemon's one event loop: ZeroMQ sockets and plain fds polled together
// (zmq_poll), each registered with the callback that serves it, plus timers
// and wake-up hints that bound the wait. Single-threaded; only quit() may be
// called from a callback to end it.
//
// A round: the round-start hook runs, due timers fire, the loop waits for
// input (or the nearest deadline), then the ready sources are called in
// their `order` (ties: the order they were scheduled), then the round-end
// hook runs. Sources cancelled during a round are not called any more;
// sources scheduled during a round are polled from the next one on.
#pragma once

#include <zmq.h>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace muster::daemon::event {

using Clock = std::chrono::steady_clock;
class Loop;

// One thing the loop serves: a ZeroMQ socket or fd polled for input, or a
// step run every round at its place in the order (no fd). Not movable: the
// loop keeps a pointer to it while it is scheduled; destroying cancels.
class SocketEvent {
 public:
  using Callback = std::function<void()>;
  SocketEvent(Loop& loop, int order, Callback callback);
  ~SocketEvent() { cancel(); }
  SocketEvent(const SocketEvent&) = delete;
  SocketEvent& operator=(const SocketEvent&) = delete;

  // Polls a ZeroMQ socket (its handle) or a plain fd for input. `every_round`
  // calls the callback in each round, input or not.
  void schedule_socket(void* socket, bool every_round = false);
  void schedule_fd(int fd);
  // Runs the callback every round, with no fd to poll.
  void schedule_step();
  void cancel();
  bool scheduled() const { return slot_ != kNone; }

 private:
  friend class Loop;
  static constexpr size_t kNone = static_cast<size_t>(-1);
  void schedule(void* socket, int fd, bool every_round);

  Loop& loop_;
  int order_;
  Callback callback_;
  void* socket_ = nullptr;
  int fd_ = -1;
  bool every_round_ = false;
  uint64_t seq_ = 0;     // scheduling order, for ties
  size_t slot_ = kNone;  // index in the loop's sources
  size_t item_ = kNone;  // index in the loop's poll items; kNone = no fd
};

// A callback at a time, fired at the start of the first round at or after
// it (the loop wakes up for it). Fired once per schedule().
class TimerEvent {
 public:
  using Callback = std::function<void()>;
  TimerEvent(Loop& loop, Callback callback);
  ~TimerEvent();
  TimerEvent(const TimerEvent&) = delete;
  TimerEvent& operator=(const TimerEvent&) = delete;

  void schedule(Clock::time_point due) {
    due_ = due;
    scheduled_ = true;
  }
  void cancel() { scheduled_ = false; }

 private:
  friend class Loop;
  Loop& loop_;
  Callback callback_;
  Clock::time_point due_{};
  bool scheduled_ = false;
};

class Loop {
 public:
  // How long the loop may wait, in milliseconds (-1 = no limit); asked
  // before every wait. For deadlines kept elsewhere and periodic checks.
  // Kept as long as the loop: what a hint refers to must outlive run().
  using WakeHint = std::function<long()>;
  using Hook = std::function<void()>;

  Loop() = default;
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  void add_wake_hint(WakeHint hint) { hints_.push_back(std::move(hint)); }
  void set_round_start(Hook hook) { round_start_ = std::move(hook); }
  void set_round_end(Hook hook) { round_end_ = std::move(hook); }

  // Runs rounds until quit(); a quit() from a source's callback ends the
  // round there (no further sources, no round-end hook).
  void run();
  void quit() { quit_ = true; }

 private:
  friend class SocketEvent;
  friend class TimerEvent;
  void add(SocketEvent& ev);
  void remove(SocketEvent& ev);
  void rebuild();
  long wait_ms();
  void fire_timers();
  bool dispatch();

  std::vector<SocketEvent*> sources_;  // by (order, seq) after rebuild()
  std::vector<zmq_pollitem_t> items_;  // the polled sources' items
  std::vector<TimerEvent*> timers_;
  std::vector<WakeHint> hints_;
  Hook round_start_, round_end_;
  uint64_t next_seq_ = 0;
  bool dirty_ = false;  // sources_ changed: rebuild before the next wait
  bool quit_ = false;
};

}  // namespace muster::daemon::event
