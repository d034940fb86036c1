// An append-only log of typed change records, beside a snapshot: a save
// costs what changed, not the whole state (a 1-byte set beside a 500 MB
// store). It knows records as (type, bytes) only; what they mean is the
// caller's (persist/state_codec.hpp for the node's jobs; the coordinator's
// rounds can use the same log with types of their own).
//
// On disk, <dir>/state.log is a sequence of commits, one per save (a loop
// round), each
//   u32 length, u32 CRC-32C (of the records), the records,
// and each record u32 length of its payload, u8 type, payload. The first
// commit holds one record, type 0: "musterd-log" and the epoch of the
// snapshot the log follows; a log of another epoch is left over from before
// a compaction and is ignored. Replay stops at the first commit that is cut
// short or fails its checksum (a write torn by a crash or a power cut):
// every commit before it was acknowledged, nothing after it was, and a
// round's records load all together or not at all.
//
// Space is reserved ahead (fallocate) for the changes a round will write,
// so a full disk refuses a change before it is made instead of failing to
// save one already made (see StateFile::reserve).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "persist/files.hpp"

namespace muster::daemon {

class ChangeLog {
 public:
  static constexpr const char* kFileName = "state.log";

  // Written in dir through dir's Env (files.hpp), as the snapshot beside it.
  explicit ChangeLog(files::Dir dir);
  ~ChangeLog();
  ChangeLog(const ChangeLog&) = delete;
  ChangeLog& operator=(const ChangeLog&) = delete;

  const std::string& path() const { return path_; }

  // A new, empty log following the snapshot of `epoch`, durable (temp file,
  // fsync, rename, directory fsync) before it returns true; on false, *why
  // says what failed and the old log (if any) is still the one in use.
  bool start(uint64_t epoch, std::string* why);
  // Goes on appending to the log replay() read, cut back to its last intact
  // record at `end` (a torn tail is dropped, not written after).
  bool resume(uint64_t end, std::string* why);
  bool open() const { return fd_ >= 0; }

  // Makes sure n more bytes can be written this round without the disk
  // running out: false, with the reason (strerror of ENOSPC, EDQUOT...),
  // when it cannot reserve them. Released at the next commit.
  bool reserve(size_t n, std::string* why);

  // Buffers one record; nothing is written before commit(), which writes
  // the buffered records as one commit.
  void append(uint8_t type, std::string_view payload);
  bool pending() const { return !buffer_.empty(); }

  // Writes the buffered records and syncs once (one fdatasync per round,
  // however many records). On a failed write the file is cut back to its
  // last durable end and the records stay buffered for the next try; on a
  // failed sync the file cannot be trusted any more (the kernel may have
  // dropped the pages) and broken() is true until start() is called again.
  bool commit(std::string* why);
  bool broken() const { return broken_; }
  // Drops the buffered records (the caller saves a snapshot instead).
  void discard() { buffer_.clear(); }

  uint64_t size() const { return end_; }  // durable bytes, header included

  // Calls f for each record of the intact commits of <dir>/state.log if its
  // epoch is `epoch`. Returns false when there is no such log; *end is the length of
  // its intact part, and *torn is set when bytes after it were ignored.
  static bool replay(const files::Dir& dir, uint64_t epoch,
                     const std::function<void(uint8_t type, std::string_view payload)>& f,
                     uint64_t* end, bool* torn);

  static uint32_t crc32c(std::string_view bytes);

 private:
  void close();

  files::Dir dir_;
  std::string path_;
  int fd_ = -1;
  uint64_t end_ = 0;        // durable length
  uint64_t allocated_ = 0;  // bytes reserved on disk (fallocate), from 0
  uint64_t claimed_ = 0;    // bytes reserve() promised this round
  std::string buffer_;
  bool broken_ = false;
};

}  // namespace muster::daemon
