// Resumable samplers (issue #24): a rank records how far its sampler got in
// an epoch, and the workers of a later generation of the same run ask for
// it. The daemon keeps these per job for as long as the run's launcher
// lives (daemon/core/sampler_progress.hpp); for a job that spans nodes the
// node daemons forward both to the job's coordinator, which keeps them.
#pragma once

#include "protocol/messages.hpp"

namespace muster::proto {

// `consumed` indices of the epoch's permutation (torch's order, unpadded)
// are used, as a sampler's state_dict computes it; replaces the sampler's
// last commit. The sampler is known by (dataset_size, seed, shuffle).
struct SamplerCommit {
  std::string job;
  uint32_t rank = 0;
  uint64_t dataset_size = 0;  // 0..kMaxDatasetSize
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;
  uint64_t epoch = 0;
  uint64_t consumed = 0;  // <= dataset_size
  MUSTER_MESSAGE(SamplerCommit);
};

// The last commit of the sampler (dataset_size, seed, shuffle) in this run
// of the job; answered with a sampler_place.
struct SamplerResume {
  std::string job;
  uint64_t dataset_size = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  MUSTER_MESSAGE(SamplerResume);
};

// found = false: nothing committed in this run (start the epoch fresh).
struct SamplerPlace {
  bool found = false;
  uint64_t epoch = 0;
  uint64_t consumed = 0;
  bool drop_last = false;
  MUSTER_MESSAGE(SamplerPlace);
};

}  // namespace muster::proto
