// The jobs' lifecycle as State routes it: which job a store request works
// on, and what a slot's end or a job's end means for its waits, its store
// and, for a node of a multi-node job, its coordinator.
#include <algorithm>

#include "core/out_answers.hpp"
#include "core/state.hpp"
#include "log.hpp"

namespace muster::daemon {

Job* State::find_store_job(const ReplyTo& to, const std::string& id) {
  if (!to.from_peer) return jobs_.find(id);
  return global_store(id);
}

Job& State::store_job(const ReplyTo& to, const std::string& id) {
  if (to.from_peer && id != forwarding_job_)
    throw Error(ErrorCode::kPermissionDenied, "a request forwarded for job '" + forwarding_job_ +
                                                  "' may not touch job '" + id + "'");
  if (Job* j = find_store_job(to, id)) return *j;
  throw Error(ErrorCode::kUnknownJob, "no job '" + id + "' on this daemon");
}

void State::restore(Job job) {
  // Heartbeats to the job's coordinator start again on their own.
  if (job.cluster) keep_link(job.cluster->coordinator);
  jobs_.restore(std::move(job));
}

void State::leave(const proto::Leave& m, std::vector<Outgoing>& out) {
  Job& job = jobs_.held_by(m.job, m.local_rank, m.pid);
  watch_.unwatch(m.pid);
  slot_ended(job, m.local_rank, "left", out);
  maybe_remove(m.job, out);
}

void State::on_pid_exit(int64_t pid, std::vector<Outgoing>& out) {
  watch_.forget(pid);
  samplers_.launcher_ended(pid);
  std::vector<std::string> touched;
  jobs_.each_live_slot_of(pid, [&](Job& job, uint32_t i) {
    bool was_reserved = job.slots[i].state == SlotState::kReserved;
    slot_ended(job, i, was_reserved ? "launcher exited" : "exited", out);
    touched.push_back(job.id);
  });
  for (const auto& id : touched) maybe_remove(id, out);
}

void State::slot_ended(Job& job, uint32_t r, const char* why, std::vector<Outgoing>& out) {
  jobs_.end_slot(job, r, why);
  cluster_slot_ended(job, r, why, out);
  // With one rank gone no barrier of the job can complete (new arrivals are
  // refused while a slot is exited): fail every waiting rank now, not at
  // its timeout, and forget who had arrived.
  OutAnswers a(out);
  store_.fail_barriers(
      job, std::to_string(r) + " (pid " + std::to_string(job.slots[r].pid) + ") " + why, a);
}

void State::maybe_remove(const std::string& id, std::vector<Outgoing>& out) {
  Job* job = jobs_.finished(id);
  if (!job) return;
  OutAnswers a(out);
  const std::string why = "job '" + id + "' ended: all its ranks exited";
  store_.fail_all(*job, ErrorCode::kPeerExited, why, a);
  log::info(log::job(id), "job=" + id + " ended");
  cluster_job_removed(*job, out);
  samplers_.job_ended(id, why, out);
  jobs_.erase(id);
}

}  // namespace muster::daemon
