// The samplers of the jobs of this node: each rank's shard of torch's
// DistributedSampler (computed from permutations cached per job, or parked
// while the Permuter computes one) and the resumable samplers' progress
// (issue #24). Its own class: none of it touches the store, the GPUs or the
// multi-node side; State calls it from the dispatcher's rows and when a
// job, a launcher or a client goes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/job_table.hpp"
#include "core/permuter.hpp"
#include "core/reply.hpp"
#include "core/request.hpp"
#include "core/sampler_progress.hpp"
#include "core/shard_cache.hpp"
#include "core/shard_waits.hpp"
#include "liveness/pidwatch.hpp"

namespace muster::daemon {

class Samplers {
 public:
  Samplers(JobTable& jobs, PidWatch& watch) : jobs_(jobs), watch_(watch) {}

  // Where permutations are computed; InlinePermuter (at once) until set.
  // Set before the first request.
  void set_permuter(std::unique_ptr<Permuter> p) { permuter_ = std::move(p); }
  // The handlers of shard, sampler_commit and sampler_resume.
  void shard(const Request& r);
  void commit(const Request& r);
  void resume(const Request& r);
  // Answers the shard requests whose permutation the Permuter finished, and
  // starts the next one. The server calls it when the Permuter's thread
  // says one is done.
  void permutations_done(std::vector<Outgoing>& out);

  // The progress per run, saved with the jobs; restore_progress puts an
  // entry back and watches its launcher again (false, and nothing kept,
  // when the launcher is gone).
  const SamplerProgress& progress() const { return progress_; }
  bool restore_progress(const std::string& job, SamplerRun run);

  // A launcher (a muster run) ended: its samplers' progress goes.
  void launcher_ended(int64_t pid) { progress_.launcher_ended(pid); }
  // The job ended: its parked shard requests fail with `why`, its
  // permutations and progress go (progress is kept for the next generation
  // only under a launcher).
  void job_ended(const std::string& id, const std::string& why, std::vector<Outgoing>& out);
  // The parked requests of a client that reads no replies, forgotten
  // unanswered; their request ids.
  std::vector<uint64_t> forget_client(const std::string& routing_id) {
    return waits_.forget_client(routing_id);
  }
  // Fails every parked request (the daemon stops).
  void cancel_all(std::vector<Outgoing>& out);

 private:
  void answer_parked(Permuter::Done done, std::vector<Outgoing>& out);

  JobTable& jobs_;
  PidWatch& watch_;
  ShardCache cache_;
  ShardWaits waits_;
  std::unique_ptr<Permuter> permuter_ = std::make_unique<InlinePermuter>();
  SamplerProgress progress_;
};

}  // namespace muster::daemon
