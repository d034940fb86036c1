#include "core/state.hpp"

#include "core/out_answers.hpp"
#include "log.hpp"
#include "muster_config.h"

#include <unistd.h>

namespace muster::daemon {

using proto::MsgType;

State::State(std::vector<gpu::Device> allowed_devices, PidWatch& watch)
    : jobs_(std::move(allowed_devices), watch),
      cluster_(new_cluster_tables(store_, jobs_)),
      watch_(watch),
      admin_uid_(::geteuid()) {}

State::~State() = default;

void State::fail(const ReplyTo& to, ErrorCode code, const std::string& msg,
                 std::vector<Outgoing>& out) {
  out.push_back(
      {to, proto::encode_error(to.request_id, code, msg), {}, static_cast<uint16_t>(code)});
}

void State::handle(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out) {
  // Decoding happens before any state is touched; a throw below this point
  // comes from validation that also runs before mutation.
  JobScope scope;
  try {
    // The message table's row, checked against where the request came from
    // and who sent it (access.cpp), before any handler runs.
    const proto::MessageTraits& t = admit(to, env);
    if (to.from_peer) {
      // A peer's Ping is answered below like a local one; the rest of its
      // requests go to the multi-node side.
      ++peer_requests_;
      if (t.type != MsgType::kPing) return peer_request(to, env, out);
    } else {
      // The job, in the sender's namespace (namespaces.cpp): from here on
      // the request names it by its key.
      scope = scope_job(to, env, t);
      authorize(to, env, t);
      if (t.forwardable && maybe_forward(to, env, out)) return;
    }
    dispatch(to, env, t, scope, out);
  } catch (const Error& e) {
    fail(to, e.code(), scope.speak(e.what()), out);
  } catch (const std::exception& e) {
    const char* name = proto::type_name(env.type);
    log::error(std::string("internal error handling ") + (name ? name : "?") + ": " + e.what());
    fail(to, ErrorCode::kInternal, std::string("internal error: ") + e.what(), out);
  }
}

void State::dispatch(const ReplyTo& to, const proto::Envelope& env, const proto::MessageTraits& t,
                     const JobScope& scope, std::vector<Outgoing>& out) {
  switch (t.type) {
    case MsgType::kPing:
      proto::Ping::unpack(env.payload);
      reply(to, proto::Pong{MUSTER_VERSION, static_cast<int64_t>(::getpid())}, out);
      return;
    case MsgType::kJoin: {
      auto m = proto::Join::unpack(env.payload);
      auto info = jobs_.join(m, scope.owner, slurm_narrow(m.pid, scope.owner, m.wants_gpu, {}));
      info.job = scope.spoken();
      reply(to, info, out);
      return;
    }
    case MsgType::kLeave:
      leave(proto::Leave::unpack(env.payload), out);
      reply(to, proto::Ok{}, out);
      return;
    case MsgType::kReserve: {
      auto m = proto::Reserve::unpack(env.payload);
      m.devices = slurm_narrow(m.launcher_pid, scope.owner, m.wants_gpu, std::move(m.devices));
      reply(to, jobs_.reserve(m, scope.owner), out);
      return;
    }
    case MsgType::kAttach:
      jobs_.attach(proto::Attach::unpack(env.payload));
      reply(to, proto::Ok{}, out);
      return;
    case MsgType::kBarrier:
      barrier(to, proto::Barrier::unpack(env.payload), out);
      return;
    case MsgType::kStatus:
      return status_request(to, proto::Status::unpack(env.payload), out);
    case MsgType::kGpuDrain:
      return gpu_drain(to, proto::GpuDrain::unpack(env.payload), out);
    case MsgType::kShard:
      return shard_request(to, env, out);
    case MsgType::kRendezvous:
      return rendezvous(to, env, out);
    case MsgType::kClusterState:
      reply(to,
            proto::ClusterStateReply{cluster_state(proto::ClusterState::unpack(env.payload).job)},
            out);
      return;
    default:
      break;
  }
  switch (t.area) {
    case proto::Area::kStore:
      return store_request(to, env, out);
    case proto::Area::kShard:  // but shard itself: sampler_commit, sampler_resume
      return sampler_request(to, env, out);
    case proto::Area::kBcast:
      return refuse_local_bcast(env, t);
    default:
      // admit() lets through only requests of the local socket, and every
      // one of those has a case above.
      throw Error(ErrorCode::kInternal, std::string("no handler for '") + t.name + "'");
  }
}

void State::refuse_local_bcast(const proto::Envelope& env, const proto::MessageTraits& t) {
  // A job on one node broadcasts through shared memory (client/lib). An
  // absent job is unknown_job, as for every other request, so that a job
  // hidden from the sender (access.cpp) is answered alike.
  const std::string job = codec::MapReader(env.payload, t.name).str("job", 256);
  jobs_.get(job);
  throw Error(ErrorCode::kInvalidArgument, std::string("'") + t.name +
                                               "' is for jobs that span nodes, which job '" + job +
                                               "' on this daemon is not");
}

std::optional<Clock::time_point> State::next_deadline() const {
  return store_.next_deadline();
}

void State::expire(Clock::time_point now, std::vector<Outgoing>& out) {
  OutAnswers a(out);
  store_.expire(
      now, [this](const ReplyTo& to, const std::string& id) { return find_store_job(to, id); }, a);
  report_stuck(now);
}

std::vector<uint64_t> State::forget_client_waits(const std::string& routing_id) {
  auto ids = store_.forget_client(routing_id, [this](const ReplyTo& to, const std::string& id) {
    return find_store_job(to, id);
  });
  for (uint64_t id : shard_waits_.forget_client(routing_id)) ids.push_back(id);
  return ids;
}

void State::cancel_all(std::vector<Outgoing>& out) {
  OutAnswers a(out);
  store_.cancel_all(a);
  for (const auto& p : shard_waits_.drop_all())
    a.error(p.to, ErrorCode::kShuttingDown, "musterd is stopping");
}

}  // namespace muster::daemon
