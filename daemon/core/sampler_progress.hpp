// How far each resumable sampler of a run got (issue #24): the last
// `consumed` a rank committed, per job and sampler, so that the workers of
// the next generation of the same `muster run` (a restart, an elastic
// re-form) continue the epoch where the last commit left it.
//
// A job's entry lives as long as its run: it is tied to the launcher pid of
// the job (muster run), which outlives the job itself between generations,
// and is dropped when that launcher ends. A job joined without a launcher
// keeps its entry only while the job exists. Saved with the daemon's state
// (persist/progress_codec.hpp). A job that spans nodes keeps its progress at
// its coordinator instead, in one of these keyed by job with launcher pid 0
// (cluster/coord_samplers.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace muster::daemon {

// One sampler's place: which permutation (dataset_size, seed, shuffle), the
// epoch and the offset into it. drop_last is carried for the record only.
struct SamplerPlace {
  uint64_t dataset_size = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t epoch = 0;
  uint64_t consumed = 0;
  bool operator==(const SamplerPlace&) const = default;
};

struct SamplerRun {
  int64_t launcher_pid = 0;       // 0: none; the entry ends with the job
  uint64_t launcher_started = 0;  // its start time (tells a reused pid), 0 = unknown
  // Keyed by sampler_key(): a run may have several samplers (train, val).
  std::map<std::string, SamplerPlace> samplers;
  bool operator==(const SamplerRun&) const = default;
};

class SamplerProgress {
 public:
  static constexpr size_t kMaxSamplersPerJob = 64;

  // The key of a sampler within its job: its permutation's identity.
  static std::string sampler_key(uint64_t dataset_size, uint64_t seed, bool shuffle);

  // Records a commit. A run of another launcher (a new muster run under an
  // old job id) replaces the old one. Returns true when the entry is new
  // (the caller watches its launcher). Throws Error(kTooLarge) past
  // kMaxSamplersPerJob samplers.
  bool commit(const std::string& job, int64_t launcher_pid, const SamplerPlace& place);
  // The last commit of that sampler in the job's run of `launcher_pid`, or
  // nullptr (also for a run of another launcher: a new muster run under an
  // old job id, before the old launcher's end is seen).
  const SamplerPlace* find(const std::string& job, int64_t launcher_pid, uint64_t dataset_size,
                           uint64_t seed, bool shuffle) const;
  // The run of `launcher_pid` ended: its jobs' entries go.
  void launcher_ended(int64_t launcher_pid);
  // The job ended: its entry goes unless a launcher keeps it for the next
  // generation.
  void job_ended(const std::string& job);

  const std::map<std::string, SamplerRun>& all() const { return runs_; }
  // Restart: an entry as the state file saved it.
  void restore(const std::string& job, SamplerRun run) { runs_[job] = std::move(run); }

 private:
  std::map<std::string, SamplerRun> runs_;
};

}  // namespace muster::daemon
