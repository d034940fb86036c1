// The open waits a status carries (doc/protocol.md, "A wait"): in
// status_reply, in heartbeats and in job_waits_reply. Walked by
// messages.cpp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace muster::proto {

// A rank in an open wait's picture.
struct WaitRank {
  int64_t rank = -1;  // -1: unknown (a wait forwarded by another node)
  int64_t node = -1;  // node rank; -1 unknown
  int64_t pid = 0;    // 0 unknown
  template <class IO>
  void fields(IO& io);
  bool operator==(const WaitRank&) const = default;
};

// The ranks one open wait lists at most (the counts say how many there are).
inline constexpr size_t kMaxWaitRanks = 64;
inline constexpr size_t kMaxWaits = 256;
// What a wait's name may take where it is made (a status, a heartbeat):
// the awaited keys of one request may be 1,024 of 1,024 bytes, and the
// decoders refuse a name over 4,096 (the whole heartbeat or status with
// it). Longer names are cut, and say how much was left out.
inline constexpr size_t kMaxWaitNameBytes = 512;
// name, cut to kMaxWaitNameBytes (on a UTF-8 character boundary) with
// " ... (N more bytes)" when it is longer.
std::string bounded_wait_name(std::string name);
// A barrier that has not filled, or the ranks that wait for the same key(s).
struct WaitStatus {
  std::string kind{};     // "barrier" | "key"
  std::string name{};     // the barrier's name, or the awaited key(s), ", "-joined
  uint64_t arrived = 0;   // barrier: ranks in; key: ranks waiting
  uint64_t expected = 0;  // barrier: the world size; key: 0
  // barrier: the missing ranks; key: the waiting ones (the first kMaxWaitRanks)
  std::vector<WaitRank> ranks{};
  int64_t age_ms = 0;  // since the first arrival, or since the oldest wait began
  bool stuck = false;  // older than the daemon's --stuck-after
  template <class IO>
  void fields(IO& io);
  bool operator==(const WaitStatus&) const = default;
};

}  // namespace muster::proto
