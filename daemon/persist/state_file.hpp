// What survives a daemon restart (kill -9, then systemd's Restart=): jobs
// with their generations, slots (state, pid, device) and stores, the GPU
// leases, drains and failures (a critical XID), the rounds and global stores
// of the multi-node jobs coordinated here, and the replies to recent state-changing requests
// (see reply_cache.hpp), in <state dir>: a snapshot, state.msgpack, and the change log that follows
// it, state.log (change_log.hpp).
//
// Nothing is acknowledged before it is durable:
//   - before a request that changes state is handled, reserve() makes sure
//     the disk has room for what it will write; when it has none the
//     request is refused with storage_failed and changes nothing;
//   - after every loop iteration that changed something, save() appends
//     what changed to the log and syncs once, before the iteration's
//     replies leave. When even that fails (an I/O error after a successful
//     reservation), the replies wait until a save works (server.cpp).
// The log is folded into a new snapshot when it outgrows the snapshot, and
// at start. Pending waits and barrier arrivals are not saved: their clients
// send them again.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "cluster/cluster.hpp"
#include "core/state.hpp"
#include "persist/change_log.hpp"
#include "persist/reply_cache.hpp"

namespace muster::daemon {

class StateFile {
 public:
  static constexpr const char* kFileName = "state.msgpack";
  // The log is folded into the snapshot once it is larger than this and
  // larger than the snapshot: saves stay proportional to what changed, and
  // the log never holds more than about the state itself.
  static constexpr uint64_t kMinCompactBytes = 1u << 20;
  static constexpr size_t kNodeBytes = 1024;  // a round's node entry, at most

  // dir_fd: the state directory, opened and checked by the caller
  // (dirs/runtime_dir.hpp open_own_dir), which this object then owns and
  // makes every file relative to; AT_FDCWD: by path (tests). Every file is
  // read and written through env (env/env.hpp), which must outlive this.
  explicit StateFile(std::string dir, int dir_fd = AT_FDCWD, Env& env = Env::posix());
  ~StateFile();
  StateFile(const StateFile&) = delete;
  StateFile& operator=(const StateFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& dir() const { return dir_.path; }

  // Once, at start, into a fresh State, before the socket serves anyone:
  // the snapshot, then the log's records over it (stopping cleanly at a torn
  // tail). Files that cannot be used (corrupt, another format version,
  // leases that contradict each other) are moved aside to *.bad with a
  // warning naming them, and the daemon starts empty; it never stops the
  // daemon. Every restored slot's pid is watched again; slots whose process
  // is gone (or whose pid now names another process) end right away through
  // State::on_pid_exit, which releases their devices. Then the log is
  // folded into a new snapshot. Returns the number of jobs restored (before
  // those endings).
  size_t load(State& state, ReplyCache& replies);

  // Room on disk for what handling a request of `request_bytes` may write
  // (job_change: it may rewrite a job's slots, a join or a reserve; peer: a
  // peer daemon's, which may add a node to a round; any change may rewrite
  // the coordinator's rounds). False, with
  // the sentence for the client in *why, when there is none.
  bool reserve(size_t request_bytes, bool job_change, bool peer, std::string* why);
  // A save failed where only a new snapshot can carry the next one: the
  // server retries save() until it works, and changes are refused meanwhile.
  bool retrying() const { return need_snapshot_ && !failure_.empty(); }

  // Makes every change since the last save durable. Never throws: false
  // (logged once per failing stretch; failure() says why) when it could not.
  bool save(const State& state, ReplyCache& replies);
  const std::string& failure() const { return failure_; }

  // The start time (clock ticks after boot, /proc/PID/stat field 22) of a
  // live pid, 0 when unknown: tells a restored pid from a reused one.
  static uint64_t start_time(int64_t pid);

  // The snapshot of everything that survives a restart. Tests compare two
  // of them to prove a refused request changed nothing.
  std::string encode(const State& state, const ReplyCache& replies);

  uint64_t snapshot_bytes() const { return snapshot_bytes_; }
  uint64_t log_bytes() const { return log_.size(); }

 private:
  bool snapshot(const State& state, ReplyCache& replies);
  void append_changes(const State& state, ReplyCache& replies);
  void append_progress(const State& state);
  // The coordinator's rounds (state_rounds.cpp).
  void append_rounds(const State& state);
  void note_rounds(const State& state);
  size_t end_gone(State& state, const std::map<int64_t, bool>& alive);
  void restore_rounds(State& state, std::map<std::string, CoordJob>& rounds);
  void restore_progress(State& state, std::map<std::string, SamplerRun>& runs);
  // The disk holds `state` as it is now.
  void note_written(const State& state);
  void set_aside(const std::string& name, const std::string& why);
  uint64_t started(int64_t pid);
  bool failed(const std::string& why);

  files::Dir dir_;
  std::string path_;
  ChangeLog log_;
  uint64_t epoch_ = 0;           // of the snapshot on disk
  uint64_t snapshot_bytes_ = 0;  // its size
  bool need_snapshot_ = true;    // the log cannot carry the next save
  // What the disk holds of each job's header, and which Job object it was.
  struct Written {
    uint64_t incarnation = 0;
    std::string header;
    std::string fingerprint;  // a closed round's (round_codec::fingerprint)
  };
  std::map<std::string, Written> written_;
  std::map<std::string, Written> written_rounds_;  // the same for the coordinator's rounds
  // What the disk holds of each run's sampler progress.
  std::map<std::string, std::string> written_progress_;
  size_t largest_header_ = 0;  // of the node's jobs
  // What a save may write of the coordinator's rounds (round_room, summed
  // at the last save; a peer request adds kNodeBytes for a node it adds).
  size_t rounds_room_ = 0;
  static size_t round_room(const CoordJob& cj, size_t record);
  // The rounds' room is claimed once per save, not per request: a save
  // writes each round's header once however many requests changed it.
  bool round_room_claimed_ = false;
  std::string written_marks_;  // the GPUs' drains and failures on disk, as a record
  std::string failure_;
  std::map<int64_t, uint64_t> start_times_;  // of the slots' pids, read once each
};

}  // namespace muster::daemon
