#include "core/sampler_progress.hpp"

#include <iterator>

#include "muster/error.hpp"

namespace muster::daemon {

std::string SamplerProgress::sampler_key(uint64_t dataset_size, uint64_t seed, bool shuffle) {
  return std::to_string(dataset_size) + ":" + std::to_string(seed) + ":" + (shuffle ? "1" : "0");
}

bool SamplerProgress::commit(const std::string& job, int64_t launcher_pid,
                             const SamplerPlace& place) {
  auto it = runs_.find(job);
  bool fresh = it == runs_.end() || it->second.launcher_pid != launcher_pid;
  if (fresh) {
    SamplerRun run;
    run.launcher_pid = launcher_pid;
    it = runs_.insert_or_assign(job, std::move(run)).first;
  }
  auto& samplers = it->second.samplers;
  const std::string key = sampler_key(place.dataset_size, place.seed, place.shuffle);
  if (!samplers.count(key) && samplers.size() >= kMaxSamplersPerJob)
    throw Error(ErrorCode::kTooLarge, "job '" + job + "' already commits " +
                                          std::to_string(kMaxSamplersPerJob) +
                                          " samplers' progress");
  samplers[key] = place;
  return fresh;
}

const SamplerPlace* SamplerProgress::find(const std::string& job, int64_t launcher_pid,
                                          uint64_t dataset_size, uint64_t seed,
                                          bool shuffle) const {
  auto it = runs_.find(job);
  if (it == runs_.end() || it->second.launcher_pid != launcher_pid) return nullptr;
  auto s = it->second.samplers.find(sampler_key(dataset_size, seed, shuffle));
  return s == it->second.samplers.end() ? nullptr : &s->second;
}

void SamplerProgress::launcher_ended(int64_t launcher_pid) {
  if (launcher_pid <= 0) return;
  std::erase_if(runs_, [&](const auto& kv) { return kv.second.launcher_pid == launcher_pid; });
}

void SamplerProgress::job_ended(const std::string& job) {
  auto it = runs_.find(job);
  if (it != runs_.end() && it->second.launcher_pid <= 0) runs_.erase(it);
}

}  // namespace muster::daemon
