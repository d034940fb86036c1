#include "event/loop.hpp"

#include "event/boundary.hpp"

#include <algorithm>
#include <cerrno>
#include <zmq.hpp>

namespace muster::daemon::event {

SocketEvent::SocketEvent(Loop& loop, int order, Callback callback)
    : loop_(loop), order_(order), callback_(std::move(callback)) {}

void SocketEvent::schedule_socket(void* socket, bool every_round) {
  schedule(socket, -1, every_round);
}

void SocketEvent::schedule_fd(int fd) {
  schedule(nullptr, fd, false);
}

void SocketEvent::schedule_step() {
  schedule(nullptr, -1, true);
}

void SocketEvent::schedule(void* socket, int fd, bool every_round) {
  cancel();
  socket_ = socket;
  fd_ = fd;
  every_round_ = every_round;
  loop_.add(*this);
}

void SocketEvent::cancel() {
  if (slot_ != kNone) loop_.remove(*this);
}

TimerEvent::TimerEvent(Loop& loop, Callback callback)
    : loop_(loop), callback_(std::move(callback)) {
  loop_.timers_.push_back(this);
}

TimerEvent::~TimerEvent() {
  std::erase(loop_.timers_, this);
}

void Loop::add(SocketEvent& ev) {
  ev.seq_ = next_seq_++;
  ev.slot_ = sources_.size();
  ev.item_ = SocketEvent::kNone;  // polled from the next rebuild() on
  sources_.push_back(&ev);
  dirty_ = true;
}

// Leaves a hole, so that a round in progress can go on over sources_.
void Loop::remove(SocketEvent& ev) {
  sources_[ev.slot_] = nullptr;
  ev.slot_ = SocketEvent::kNone;
  ev.item_ = SocketEvent::kNone;
  dirty_ = true;
}

// Only when sources came or went: a steady loop polls the same items
// (zmq_poll rewrites their revents) and allocates nothing.
void Loop::rebuild() {
  std::erase(sources_, nullptr);
  std::sort(sources_.begin(), sources_.end(), [](const SocketEvent* a, const SocketEvent* b) {
    return a->order_ != b->order_ ? a->order_ < b->order_ : a->seq_ < b->seq_;
  });
  items_.clear();
  for (size_t i = 0; i < sources_.size(); ++i) {
    SocketEvent& ev = *sources_[i];
    ev.slot_ = i;
    ev.item_ = SocketEvent::kNone;
    if (!ev.socket_ && ev.fd_ < 0) continue;
    ev.item_ = items_.size();
    items_.push_back({ev.socket_, ev.fd_, ZMQ_POLLIN, 0});
  }
  dirty_ = false;
}

long Loop::wait_ms() {
  long ms = -1;
  auto now = Clock::now();
  for (const TimerEvent* t : timers_) {
    if (!t->scheduled_) continue;
    // +1: woken a little early, the timer would wait another round.
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t->due_ - now).count();
    left = std::max<long>(0, left + 1);
    ms = ms < 0 ? left : std::min(ms, left);
  }
  for (const auto& hint : hints_) {
    long h = hint();
    if (h >= 0) ms = ms < 0 ? h : std::min(ms, h);
  }
  return ms;
}

void Loop::fire_timers() {
  auto now = Clock::now();
  for (size_t i = 0; i < timers_.size(); ++i) {
    TimerEvent* t = timers_[i];
    if (!t->scheduled_ || now < t->due_) continue;
    t->scheduled_ = false;
    contained("a timer", t->callback_);
  }
}

// Calls the ready sources (and the every-round ones) in order. False when a
// callback asked to quit.
bool Loop::dispatch() {
  // Sources scheduled by a callback land past `n`: they wait for a round.
  for (size_t i = 0, n = sources_.size(); i < n; ++i) {
    SocketEvent* ev = sources_[i];
    if (!ev) continue;  // cancelled earlier in this round
    bool ready = ev->item_ != SocketEvent::kNone && (items_[ev->item_].revents & ZMQ_POLLIN);
    if (!ready && !ev->every_round_) continue;
    // The backstop (boundary.hpp): a source's handlers reply to what they
    // can; whatever still throws ends that source's turn, not the loop.
    contained("serving an event source", ev->callback_);
    if (quit_) return false;
  }
  return true;
}

void Loop::run() {
  quit_ = false;
  for (;;) {
    if (round_start_) contained("the round's start", round_start_);
    fire_timers();
    if (dirty_) rebuild();
    long timeout = wait_ms();
    if (zmq_poll(items_.data(), static_cast<int>(items_.size()), timeout) < 0) {
      if (zmq_errno() != EINTR) throw zmq::error_t();
      continue;  // a signal handler ran; it wakes us through a source
    }
    if (!dispatch()) return;
    if (round_end_) contained("the round's end", round_end_);
    if (quit_) return;
  }
}

}  // namespace muster::daemon::event
