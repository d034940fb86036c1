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
    fail(to, e.code(), scope.speak(e.what()), out);
  } catch (const std::exception& e) {
    const char* name = proto::type_name(env.type);
    log::error(std::string("internal error handling ") + (name ? name : "?") + ": " + e.what());
    fail(to, ErrorCode::kInternal, std::string("internal error: ") + e.what(), out);
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

}  // namespace muster::daemon
