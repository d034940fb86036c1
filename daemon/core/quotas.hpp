// What one job or one uid may make the daemon hold, so that a local user
// cannot grow it without bound. Each refusal is quota_exceeded (17) with a
// sentence that names the quota and the option that raises it, and changes
// nothing. Quotas are checked when something would grow, never on a
// restore: a state saved under a higher quota loads whole, and what it
// holds above a lowered one may shrink but not grow.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/ceilings.hpp"
#include "jobs/job.hpp"

namespace muster::daemon {

// 0 = no limit, for each.
struct Quotas {
  // Bytes of keys and values in one job's store. Three of the largest
  // values (64 MiB each) and the rest, or a million NCCL ids; the store is
  // for rendezvous data, and a node of 8 jobs then holds at most 2 GiB of
  // stores.
  uint64_t store_bytes = uint64_t{256} << 20;
  // Keys in one job's store: each costs ~100 bytes of bookkeeping beside
  // its bytes, so the byte quota alone would let 1-byte keys cost 25 GiB.
  // 262,144 keys is 64 keys for each of 4,096 ranks.
  uint64_t store_keys = uint64_t{1} << 18;
  // Requests parked in one job (store_get and store_wait with a timeout,
  // barrier arrivals): each rank blocks in one at a time, so 4,096 (the
  // largest local world) is never reached by a well-behaved job; a parked
  // wait may hold up to 1 MiB of key names.
  uint64_t parked_waits = 4096;
  // Jobs one uid may own on this daemon at once.
  uint64_t jobs_per_uid = 256;
  // The daemon's global ceilings and each uid's share of them, in bytes
  // (ceilings.hpp): what all stores and parked requests may take of its
  // memory, and what the stores may take of the state directory. Derived
  // from the machine at start unless given (musterd --max-memory,
  // --max-state-bytes).
  uint64_t memory = 0;
  uint64_t state = 0;
};

class HoldingsCount;

// Throws quota_exceeded when setting `key` to a value of `value_bytes`
// bytes would take the job's store over its key or byte quota, or the
// daemon or the job's owner over a ceiling (st: what everyone holds). A
// change that does not grow the store is always allowed.
void check_store_quota(const Job& job, const Quotas& q, const std::string& key, size_t value_bytes,
                       const HoldingsCount& held);
// Throws quota_exceeded when a change would leave the job's store with
// `keys` keys and `bytes` bytes over a quota or a ceiling it grows towards.
void check_store_growth(const Job& job, const Quotas& q, uint64_t keys, uint64_t bytes,
                        const HoldingsCount& held);
// Throws quota_exceeded when the job already has its quota of parked
// requests, or when one naming `key_bytes` bytes of keys would take the
// daemon or the job's owner over the memory ceiling.
void check_parked_quota(const Job& job, const Quotas& q, uint64_t key_bytes,
                        const HoldingsCount& held);

// Sets q.memory and q.state where they are to be derived from the machine
// (core/ceilings.hpp; dir_fd: the state directory) and logs each ceiling
// and where it came from.
void derive_ceilings(Quotas& q, bool memory_auto, bool state_auto, int dir_fd);

// Sets q.memory and q.state from --max-memory and --max-state-bytes
// (core/ceilings.hpp parse_ceiling); throws std::runtime_error naming the
// option when one is neither auto, none nor a size.
void parse_ceilings(Quotas& q, const std::string& memory, const std::string& state);

// The bytes of a request's key names.
uint64_t key_bytes(const std::vector<std::string>& keys);

// The uid a job's memory is charged to: its owner, or the one its key names.
int64_t charged_uid(const Job& job);

}  // namespace muster::daemon
