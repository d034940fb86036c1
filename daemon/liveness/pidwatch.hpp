// Knows, without polling, when a process ends: one pidfd per watched pid
// (Linux >= 5.3), polled by the event loop. Where pidfd_open is missing the
// loop falls back to a periodic /proc check of the few pids concerned.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace muster::daemon {

class PidWatch {
 public:
  PidWatch() = default;
  PidWatch(const PidWatch&) = delete;
  PidWatch& operator=(const PidWatch&) = delete;
  ~PidWatch();

  // Reference counted; false when the pid does not exist (or is a zombie).
  bool watch(int64_t pid);
  void unwatch(int64_t pid);
  bool watched(int64_t pid) const { return watched_.count(pid) != 0; }

  // Told of every pidfd opened (open = true) and about to be closed, so
  // that the event loop polls exactly these; told of the open ones at once.
  using Listener = std::function<void(int64_t pid, int fd, bool open)>;
  void set_listener(Listener listener);
  bool needs_sweep() const;  // some pid has no pidfd
  std::vector<int64_t> sweep_dead() const;

  // Forgets the pid entirely (after its exit was handled).
  void forget(int64_t pid);

  static bool alive(int64_t pid);
  // What /proc/<pid>/stat says after the command name's ") ", from the
  // state letter (field 3) on; nullopt when the pid is gone or the line
  // is malformed. The name may hold blanks and parentheses, hence rfind.
  static std::optional<std::string> stat_fields(int64_t pid);
  // Its start time (/proc/PID/stat field 22, in clock ticks since boot),
  // which tells a reused pid; 0 when it cannot be read.
  static uint64_t start_time(int64_t pid);
  // Whether ancestor is pid's parent, grandparent, ... (from /proc).
  static bool is_ancestor(int64_t ancestor, int64_t pid);

 private:
  struct Entry {
    int fd = -1;
    int refs = 0;
  };
  void close_fd(int64_t pid, Entry& e);
  std::map<int64_t, Entry> watched_;
  Listener listener_;
};

}  // namespace muster::daemon
