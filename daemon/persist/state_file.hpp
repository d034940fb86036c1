// What survives a daemon restart (kill -9, then systemd's Restart=): jobs
// with their generations, slots (state, pid, device) and stores, the GPU
// leases, and the replies to recent state-changing requests (see
// reply_cache.hpp), in <state dir>/state.msgpack (MessagePack).
//
// Written atomically (temp file, fsync, rename, fsync of the directory)
// after every loop iteration that changed something, before its replies are
// sent: a client never sees an answer the file does not hold. Pending waits
// and barrier arrivals are not saved: their clients send them again.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/state.hpp"
#include "persist/reply_cache.hpp"

namespace muster::daemon {

class StateFile {
 public:
  static constexpr uint64_t kFormatVersion = 1;
  static constexpr const char* kFileName = "state.msgpack";

  explicit StateFile(std::string dir);
  ~StateFile();
  StateFile(const StateFile&) = delete;
  StateFile& operator=(const StateFile&) = delete;

  const std::string& path() const { return path_; }

  // Once, at start, into a fresh State, before the socket serves anyone.
  // A file that cannot be used (corrupt, another format version, leases
  // that contradict each other) is moved aside to state.msgpack.bad with a
  // warning naming it, and the daemon starts empty; it never stops the
  // daemon. Every restored slot's pid is watched again; slots whose process
  // is gone (or whose pid now names another process) end right away through
  // State::on_pid_exit, which releases their devices. Returns the number of
  // jobs restored (before those endings).
  size_t load(State& state, ReplyCache& replies);

  // Writes when the encoded state differs from the last one written.
  // Never throws: false (logged) when the file could not be written.
  bool save(const State& state, const ReplyCache& replies);

  // The start time (clock ticks after boot, /proc/PID/stat field 22) of a
  // live pid, 0 when unknown: tells a restored pid from a reused one.
  static uint64_t start_time(int64_t pid);

  // The bytes save() writes: everything that survives a restart. Tests
  // compare two of them to prove a refused request changed nothing.
  std::string encode(const State& state, const ReplyCache& replies);

 private:
  void set_aside(const std::string& why);

  std::string dir_;
  std::string path_;
  std::string last_;  // bytes of the last successful write
  bool failing_ = false;
  std::map<int64_t, uint64_t> start_times_;  // of the slots' pids, read once each
};

}  // namespace muster::daemon
