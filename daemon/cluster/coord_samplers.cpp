// Resumable samplers of a job that spans nodes (issue #24): any rank may
// commit and the last commit wins, so the record has to be where every node
// of every later generation can read it, whichever nodes are lost: at the
// job's coordinator, which node daemons forward sampler_commit and
// sampler_resume to (the message table's forwardable column).
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
// kRunGap the run is taken as over. It is
// not saved with the coordinator's state, like the rounds and the global
// store (issue #27): a restarted coordinator starts every epoch afresh.
#include <algorithm>

#include "cluster/coordinator.hpp"
#include "log.hpp"
#include "protocol/sampler_messages.hpp"

namespace muster::daemon {

namespace {

// Longer than a launcher takes to restart its group: stopping the workers
// (muster run's --grace-period, 5 s by default), reserving, joining again.
constexpr std::chrono::seconds kRunGap{60};

}  // namespace

void Coordinator::sampler_request(const ReplyTo& to, const proto::Envelope& env,
                                  const std::string& forwarding, std::vector<Outgoing>& out) {
  if (env.type == static_cast<uint16_t>(proto::SamplerResume::kType)) {
    auto m = proto::SamplerResume::unpack(env.payload);
    check_forwarded(m.job, forwarding);
    proto::SamplerPlace r;
    if (const auto* p = samplers_.find(m.job, 0, m.dataset_size, m.seed, m.shuffle))
      r = {true, p->epoch, p->consumed, p->drop_last};
    return reply(to, r, out);
  }
  auto m = proto::SamplerCommit::unpack(env.payload);
  check_forwarded(m.job, forwarding);
  // forward_in found the round live at the Forward's generation.
  const uint32_t world = rounds_.at(m.job).store.global_world_size;
  if (m.rank >= world)
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(m.rank) +
                                                 " is outside job '" + m.job + "' of world size " +
                                                 std::to_string(world));
  samplers_.commit(m.job, 0, {m.dataset_size, m.seed, m.shuffle, m.drop_last, m.epoch, m.consumed});
  reply(to, proto::Ok{}, out);
}

void Coordinator::round_ended(const std::string& job, const CoordJob& cj, Clock::time_point now) {
  if (!samplers_.all().count(job)) return;
  Lingering l{now + std::max<Clock::duration>(kRunGap, peer_timeout_), cj.owner_uid, {}};
  for (const auto& n : cj.nodes)
    if (!n.run.empty()) l.runs.insert(n.run);
  lingering_[job] = std::move(l);
}

void Coordinator::round_started(const std::string& job, int64_t owner_uid) {
  auto it = lingering_.find(job);
  // Another user's job of the same name reads nothing of this one.
  if (it == lingering_.end() || it->second.owner_uid == owner_uid) return;
  samplers_.job_ended(job);
  lingering_.erase(it);
}

void Coordinator::run_joined(const std::string& job, const std::string& run) {
  auto it = lingering_.find(job);
  if (it != lingering_.end() && !run.empty() && it->second.runs.count(run)) lingering_.erase(it);
}

void Coordinator::runs_decided(const std::string& job) {
  auto it = lingering_.find(job);
  if (it == lingering_.end()) return;
  if (!it->second.runs.empty()) {
    log::info("job=" + job + " is a new launch: its samplers start afresh (the last run's " +
              "commits are not resumed)");
    samplers_.job_ended(job);
  }
  lingering_.erase(it);
}

void Coordinator::samplers_tick(Clock::time_point now) {
  for (auto it = lingering_.begin(); it != lingering_.end();) {
    if (now < it->second.until) {
      ++it;
      continue;
    }
    log::info("job=" + it->first + " did not come back: its samplers' progress is dropped");
    samplers_.job_ended(it->first);
    it = lingering_.erase(it);
  }
}

}  // namespace muster::daemon
