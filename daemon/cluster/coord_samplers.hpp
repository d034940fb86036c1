// Resumable samplers of a job that spans nodes (issue #24), kept at its
// coordinator: any rank may commit and the last commit wins, so the record
// has to be where every node of every later generation can read it,
// whichever nodes are lost. Node daemons forward sampler_commit and
// sampler_resume here (the message table's forwardable column).
//
// Lifetime: the progress of a job lives with its round (CoordJob), which
// the coordinator keeps across generations and elastic re-forms. A round
// also ends between two generations when every node's group stopped before
// any joined again (a restart after a failure), so the progress lingers for
// kRunGap after its round ends, and a round of the same job and owner that
// starts meanwhile takes it over if a node of the same muster run joins it
// (NodeJoin::run: a launcher outlives its job between generations; a new
// launch, after a preemption say, has new ones and starts afresh, resuming
// only from the user's own load_state_dict). Rounds whose nodes tell no run
// (jobs joined without muster run) are taken over by the owner alone. Past
// kRunGap the run is taken as over. It is not saved with the coordinator's
// state, like the rounds and the global store (issue #27): a restarted
// coordinator starts every epoch afresh.
#pragma once

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "cluster/cluster.hpp"
#include "core/reply.hpp"
#include "core/sampler_progress.hpp"
#include "protocol/sampler_messages.hpp"

namespace muster::daemon {

class CoordSamplers {
 public:
  // Requests forwarded for `forwarding` (the only job they may touch), of
  // a round live at the Forward's generation; world: its ranks.
  void commit(const ReplyTo& to, const proto::SamplerCommit& m, const std::string& forwarding,
              uint32_t world, std::vector<Outgoing>& out);
  void resume(const ReplyTo& to, const proto::SamplerResume& m, const std::string& forwarding,
              std::vector<Outgoing>& out);
  const SamplerProgress& progress() const { return progress_; }
  // Progress of ended rounds waiting for their run to come back.
  bool lingering() const { return !lingering_.empty(); }

  // The job's round ends (every node left, or none is left): its progress
  // lingers for the run's next generation, at least `timeout` (a node's
  // silence before it counts as lost).
  void round_ended(const std::string& job, const CoordJob& cj, Clock::time_point now,
                   Clock::duration timeout);
  // A fresh round of the job: lingering progress of another owner goes.
  void round_started(const std::string& job, int64_t owner_uid);
  // A node of `run` joined the job's round: lingering progress of the same
  // run is taken over.
  void run_joined(const std::string& job, const std::string& run);
  // The job's round closes: lingering progress nobody of its run took over
  // belonged to an earlier launch, and goes.
  void runs_decided(const std::string& job);
  // Lingering progress whose run did not come back in time goes.
  void tick(Clock::time_point now);

 private:
  // By job id (launcher pid 0: the run is the round's).
  SamplerProgress progress_;
  struct Lingering {
    Clock::time_point until;
    int64_t owner_uid = -1;
    std::set<std::string> runs;  // of the ended round's nodes (none known: empty)
  };
  std::map<std::string, Lingering> lingering_;
};

}  // namespace muster::daemon
