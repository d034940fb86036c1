// Resumable samplers (issue #24): sampler_commit records how far a sampler
// of the job got, sampler_resume tells a later generation of the same run.
// What is kept, and for how long, is SamplerProgress's (sampler_progress.hpp).
// Those of a job that spans nodes never reach these handlers: they are
// forwarded to its coordinator (cluster/coord_samplers.cpp).
#include "core/state.hpp"
#include "protocol/sampler_messages.hpp"

namespace muster::daemon {

void State::sampler_resume(const ReplyTo& to, const proto::SamplerResume& m,
                           std::vector<Outgoing>& out) {
  const Job& job = jobs_.get(m.job);
  proto::SamplerPlace r;
  if (const auto* p = progress_.find(m.job, job.launcher_pid, m.dataset_size, m.seed, m.shuffle))
    r = {true, p->epoch, p->consumed, p->drop_last};
  reply(to, r, out);
}

void State::sampler_commit(const ReplyTo& to, const proto::SamplerCommit& m,
                           std::vector<Outgoing>& out) {
  const Job& job = jobs_.get(m.job);
  if (m.rank >= job.world_size())
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(m.rank) +
                                                 " is outside job '" + m.job + "' of world size " +
                                                 std::to_string(job.world_size()));
  const SamplerPlace place{m.dataset_size, m.seed, m.shuffle, m.drop_last, m.epoch, m.consumed};
  const int64_t launcher = job.launcher_pid;
  // A new entry lives as long as its launcher: watched from now on, and
  // dropped in on_pid_exit. A launcher already gone takes its entry along.
  if (progress_.commit(m.job, launcher, place) && launcher > 0 && !watch_.watch(launcher))
    progress_.launcher_ended(launcher);
  reply(to, proto::Ok{}, out);
}

bool State::restore_progress(const std::string& job, SamplerRun run) {
  if (run.launcher_pid > 0 ? !watch_.watch(run.launcher_pid) : !jobs_.find(job)) return false;
  progress_.restore(job, std::move(run));
  return true;
}

}  // namespace muster::daemon
