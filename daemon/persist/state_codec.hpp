// The bytes of what survives a restart: the snapshot (state.msgpack, the
// whole state) and the records of the change log that follow it
// (persist/change_log.hpp). Decoding checks everything before any of it
// touches a State; StateFile (state_file.hpp) decides when to write what.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/cluster.hpp"
#include "core/sampler_progress.hpp"
#include "core/state.hpp"
#include "persist/reply_cache.hpp"
#include "protocol/codec.hpp"

namespace muster::daemon::state_codec {

// Version 2 adds the epoch (which change log follows the snapshot); a
// version 1 snapshot (no log beside it) still loads, as epoch 0. Version 3
// adds the GPUs' drains and failures (DeviceMark); older ones load with none.
// Version 4 adds the rounds of the jobs coordinated here (round_codec.hpp).
inline constexpr uint64_t kFormatVersion = 4;
inline constexpr uint64_t kOldestVersion = 1;

// The change records of the log.
enum Record : uint8_t {
  kJob = 1,            // a job's header (all but its store), replacing the one before
  kJobGone = 2,        // a job and its store, gone
  kKey = 3,            // one key of a job's store set
  kKeyGone = 4,        // one key erased
  kReply = 5,          // a reply kept for a client's resends
  kDevices = 6,        // every GPU's drain and failure, replacing the ones before
  kProgress = 7,       // a run's resumable-sampler progress, replacing the one before
  kProgressGone = 8,   // a run's progress, gone
  kRound = 9,          // a coordinated job's round (all but its store), replacing the one before
  kRoundGone = 10,     // a round and its global store, gone
  kRoundKey = 11,      // one key of a round's global store set
  kRoundKeyGone = 12,  // one key erased
};

// A live pid's start time (/proc/PID/stat field 22), cached by the caller.
using StartTime = std::function<uint64_t(int64_t pid)>;

// Everything read back, checked, in the form State::restore takes.
struct Loaded {
  uint64_t epoch = 0;
  struct JobAt {
    Job job;
    std::vector<uint64_t> started;  // per slot: its pid's start time when saved
  };
  std::map<std::string, JobAt> jobs;
  struct Reply {
    std::string client;
    int64_t uid;
    ReplyCache::Entry e;
  };
  std::vector<Reply> replies;
  std::vector<DeviceMark> marks;
  // The resumable samplers' progress per job (progress_codec.hpp); each
  // run's launcher_started is its launcher's start time when saved.
  std::map<std::string, SamplerRun> progress;
  // The rounds of the jobs this daemon coordinates, with their global stores.
  std::map<std::string, CoordJob> rounds;
};

// Called between the parts of a snapshot (after each job, each key): it
// may take what is in the packer's buffer so far (and clear it), so that a
// save never holds the whole state twice (see encode_snapshot).
using Spill = std::function<void()>;

// A store's keys as an array of {k, v} maps, sorted (the same store, the
// same bytes), and back from the map field "kv" of r (what: for errors).
void pack_store(codec::Packer& p, const KeyValues& kv, const Spill& spill = nullptr);
void unpack_store(const codec::MapReader& r, KeyValues& kv, const std::string& what);

// The whole state as one snapshot, handed to `emit` in pieces of about
// kSpillBytes (a piece holds one key's value whole, at most
// limits::kMaxValueBytes more): a save costs the state plus that buffer,
// not the state twice or three times over (a uid's 959 MiB of stores once
// peaked at 3 GiB while being saved).
constexpr size_t kSpillBytes = size_t{1} << 20;
void encode_snapshot(const State& state, const ReplyCache& replies, uint64_t epoch,
                     const StartTime& started, const std::function<void(std::string_view)>& emit);
// The same, whole (tests compare two of them).
std::string encode_snapshot(const State& state, const ReplyCache& replies, uint64_t epoch,
                            const StartTime& started);
// Throws Error with the reason when the bytes cannot be used.
Loaded decode_snapshot(const std::string& bytes);

// Log records.
std::string job_header(const Job& job, const StartTime& started);
std::string job_gone(const std::string& job);
std::string key_set(const std::string& job, const std::string& key, const std::string& value);
std::string key_gone(const std::string& job, const std::string& key);
std::string reply(const std::string& client, int64_t uid, const ReplyCache::Entry& e);
std::string device_marks(const std::vector<DeviceMark>& marks);
// Applies one record; throws Error when it does not decode.
void apply(Loaded& l, uint8_t type, std::string_view payload);

// The checks a loaded state must pass as a whole: no device held twice.
void check(const Loaded& l);

}  // namespace muster::daemon::state_codec
