#include "core/state.hpp"

#include <unistd.h>

#include <stdexcept>

#include "core/out_answers.hpp"
#include "log.hpp"

namespace muster::daemon {

State::State(std::vector<gpu::Device> allowed_devices, PidWatch& watch)
    : jobs_(std::move(allowed_devices), watch),
      watch_(watch),
      cluster_(new_multi_node()),
      stores_(store_, quotas_, holdings_, [this](const ReplyTo& to, const std::string& id) -> Job& {
        return store_job(to, id);
      }) {
  // A request type without its handler would be refused as an internal
  // error at its first use; a daemon built so does not start.
  if (auto gaps = handler_gaps(); !gaps.empty())
    throw std::logic_error("the dispatcher's column is wrong: " + gaps.front());
}

State::~State() = default;

void State::handle(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out) {
  // Decoding happens before any state is touched; a throw below this point
  // comes from validation that also runs before mutation.
  JobScope scope;
  try {
    // The message table's row, checked against where the request came from
    // and who sent it (access.cpp), before any handler runs.
    const proto::MessageTraits& t = Access::admit(to, env);
    if (to.from_peer) {
      // admit() let through only what a peer daemon may ask (and ping);
      // the column's rows for them are cluster/peer_requests.cpp's.
      ++peer_requests_;
    } else {
      // The job, in the sender's namespace (namespaces.cpp): from here on
      // the request names it by its key.
      scope = access_.scope_job(to, env, t);
      access_.authorize(to, env, t);
    }
    // Where a request of a job that spans nodes is served: decided once,
    // by route() (cluster/route.hpp).
    const Request r{to, env, t, scope, out};
    if (t.forwardable && !to.from_peer && route_away(r)) return;
    dispatch(r);
  } catch (const Error& e) {
    send_error(out, to, e.code(), scope.speak(e.what()));
  } catch (const std::exception& e) {
    const char* name = proto::type_name(env.type);
    log::error(std::string("internal error handling ") + (name ? name : "?") + ": " + e.what());
    send_error(out, to, ErrorCode::kInternal, std::string("internal error: ") + e.what());
  }
}

std::optional<Clock::time_point> State::next_deadline() const {
  return store_.next_deadline();
}

void State::expire(Clock::time_point now, std::vector<Outgoing>& out) {
  OutAnswers a(out);
  store_.expire(
      now, [this](const ReplyTo& to, const std::string& id) { return find_store_job(to, id); }, a);
  reports_.report_stuck(now);
}

std::vector<uint64_t> State::forget_client_waits(const std::string& routing_id) {
  auto ids = store_.forget_client(routing_id, [this](const ReplyTo& to, const std::string& id) {
    return find_store_job(to, id);
  });
  for (uint64_t id : samplers_.forget_client(routing_id)) ids.push_back(id);
  return ids;
}

void State::cancel_all(std::vector<Outgoing>& out) {
  OutAnswers a(out);
  store_.cancel_all(a);
  samplers_.cancel_all(out);
}

// The jobs' lifecycle as State routes it: which job a store request works
// on, and what a slot's end or a job's end means for its waits, its store,
// its samplers and, for a node of a multi-node job, its coordinator.
Job* State::find_store_job(const ReplyTo& to, const std::string& id) {
  if (!to.from_peer) return jobs_.find(id);
  return cluster_side().global_store(id);
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
  if (job.cluster) cluster_side().keep_link(job.cluster->coordinator);
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
  cluster_side().slot_ended(job, r, why, out);
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
  cluster_side().job_removed(*job, out);
  samplers_.job_ended(id, why, out);
  jobs_.erase(id);
}

}  // namespace muster::daemon
