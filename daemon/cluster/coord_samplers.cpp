// CoordSamplers: see coord_samplers.hpp.
#include <algorithm>

#include "cluster/coord_samplers.hpp"
#include "core/out_answers.hpp"
#include "log.hpp"
#include "protocol/sampler_messages.hpp"

namespace muster::daemon {

namespace {

// Longer than a launcher takes to restart its group: stopping the workers
// (muster run's --grace-period, 5 s by default), reserving, joining again.
constexpr std::chrono::seconds kRunGap{60};

}  // namespace

void CoordSamplers::resume(const ReplyTo& to, const proto::SamplerResume& m,
                           const std::string& forwarding, std::vector<Outgoing>& out) {
  check_forwarded(m.job, forwarding);
  proto::SamplerPlace r;
  if (const auto* p = progress_.find(m.job, 0, m.dataset_size, m.seed, m.shuffle))
    r = {true, p->epoch, p->consumed, p->drop_last};
  send_reply(out, to, r);
}

void CoordSamplers::commit(const ReplyTo& to, const proto::SamplerCommit& m,
                           const std::string& forwarding, uint32_t world,
                           std::vector<Outgoing>& out) {
  check_forwarded(m.job, forwarding);
  if (m.rank >= world)
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(m.rank) +
                                                 " is outside job '" + m.job + "' of world size " +
                                                 std::to_string(world));
  progress_.commit(m.job, 0, {m.dataset_size, m.seed, m.shuffle, m.drop_last, m.epoch, m.consumed});
  send_reply(out, to, proto::Ok{});
}

void CoordSamplers::round_ended(const std::string& job, const CoordJob& cj, Clock::time_point now,
                                Clock::duration timeout) {
  if (!progress_.all().count(job)) return;
  Lingering l{now + std::max<Clock::duration>(kRunGap, timeout), cj.owner_uid, {}};
  for (const auto& n : cj.nodes)
    if (!n.run.empty()) l.runs.insert(n.run);
  lingering_[job] = std::move(l);
}

void CoordSamplers::round_started(const std::string& job, int64_t owner_uid) {
  auto it = lingering_.find(job);
  // Another user's job of the same name reads nothing of this one.
  if (it == lingering_.end() || it->second.owner_uid == owner_uid) return;
  progress_.job_ended(job);
  lingering_.erase(it);
}

void CoordSamplers::run_joined(const std::string& job, const std::string& run) {
  auto it = lingering_.find(job);
  if (it != lingering_.end() && !run.empty() && it->second.runs.count(run)) lingering_.erase(it);
}

void CoordSamplers::runs_decided(const std::string& job) {
  auto it = lingering_.find(job);
  if (it == lingering_.end()) return;
  if (!it->second.runs.empty()) {
    log::info("job=" + job + " is a new launch: its samplers start afresh (the last run's " +
              "commits are not resumed)");
    progress_.job_ended(job);
  }
  lingering_.erase(it);
}

void CoordSamplers::tick(Clock::time_point now) {
  for (auto it = lingering_.begin(); it != lingering_.end();) {
    if (now < it->second.until) {
      ++it;
      continue;
    }
    log::info("job=" + it->first + " did not come back: its samplers' progress is dropped");
    progress_.job_ended(it->first);
    it = lingering_.erase(it);
  }
}

}  // namespace muster::daemon
