// The daemon's global ceilings, and each user's fair share of them: the
// per-job and per-uid quotas (quotas.hpp) bound one job or one uid, but 256
// jobs of 256 MiB each let one uid store 959 MiB on a test node, with
// another user's set+get then taking 5.6 s. So what clients make the daemon
// hold is also counted for the whole daemon and for each uid:
//
//   memory: the keys and values of every store (a node's jobs and the
//           global stores of the rounds it coordinates, kKeyCost more per
//           key for its bookkeeping) and the key names of parked requests;
//   state:  the keys and values of the stores, which is what the state
//           directory saves (the snapshot, a log up to the snapshot's size,
//           and during a compaction the next snapshot: at most three times
//           this on disk).
//
// A uid that holds anything (a job, a round, a parked request) is active.
// While n uids are active, each may grow to 1/max(2, n) of a ceiling: alone
// it may take half, so the next user finds at least the other half; with
// more users the shares shrink, and what a uid holds above its share may
// shrink but not grow. Root's jobs are the operator's and count towards
// the total, but are held to the ceiling alone, not to a share.
//
// Replies queued for connections that read none of them are counted
// beside these by the server (server/pinned_replies.hpp): over a ceiling
// or a share, the connection that pins the most is shut. Not counted:
// broadcast pools, whose pages the rank allocated whole and the kernel
// charges to it (pools with holes are refused, cluster/broadcast/pool_files.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace muster::daemon {

// What the daemon holds now, for one uid and for everyone: counted when
// something would grow (State::holdings).
struct Holdings {
  uint64_t memory_total = 0, memory_mine = 0;
  uint64_t state_total = 0, state_mine = 0;
  uint64_t active = 0;  // uids holding anything, the asker counted as one
};

// What a store of `keys` keys and `bytes` bytes of keys and values costs
// the daemon's memory: each key's node, hash and bookkeeping beside its bytes.
inline constexpr uint64_t kKeyCost = 100;
inline uint64_t store_cost(uint64_t keys, uint64_t bytes) {
  return bytes + keys * kKeyCost;
}

// Throws quota_exceeded, with a sentence naming the ceiling and the option
// that sets it, when `memory_growth` and `state_growth` more bytes for uid
// would take the daemon over a ceiling (`memory`, `state`: 0 = none) or the
// uid over its share of one.
void check_ceilings(uint64_t memory, uint64_t state, const Holdings& h, int64_t uid,
                    uint64_t memory_growth, uint64_t state_growth);

// The defaults, from the machine (`root`: "" for the real /proc and /sys,
// else a directory that holds copies, for tests). *how says where the
// number came from.
//
// Memory: half of the daemon's cgroup limit (memory.max, systemd's
// MemoryMax=) where one is set: the kernel kills the daemon at that limit,
// and the other half is for what a request costs while it is handled
// (its frame, the decoded copy, the reply) and the daemon's own tables.
// Else a quarter of MemAvailable at start: the node's memory is for the
// training jobs, and the daemon must never be what drives it into the OOM
// killer. At least 64 MiB.
uint64_t default_memory_ceiling(const std::string& root, std::string* how);
// State: a sixth of the size of the state directory's file system, so that
// the state files (up to three times the stores, see above) never take
// more than half of it. 0 (none) when it cannot be asked.
uint64_t default_state_ceiling(int dir_fd, std::string* how);

// "auto", "none"/"0", or a number of bytes with an optional K, M, G or T
// (binary) suffix; throws std::invalid_argument naming `option` otherwise.
// auto: sets *is_auto.
uint64_t parse_ceiling(const std::string& text, const char* option, bool* is_auto);

}  // namespace muster::daemon
