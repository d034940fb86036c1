// The dispatcher: the daemon's column of the message table. Each request
// type has one row here (or, for what peer daemons ask and what a peer
// forwards, in cluster/peer_requests.cpp) naming its handler; State::handle
// checks a request against its row of the message table (access.cpp),
// routes it, and calls the handler through dispatch() inside its one
// exception boundary. A type of the message table that has no handler, or
// two, stops the daemon at start (handler_gaps), and a test names it.
#include <unistd.h>

#include <algorithm>

#include "core/state.hpp"
#include "job_id.hpp"
#include "muster_config.h"

namespace muster::daemon {

using proto::MsgType;

std::span<const Handler> State::local_handlers() {
  static const Handler rows[] = {
      {MsgType::kPing,
       [](State&, const Request& r) {
         r.unpack<proto::Ping>();
         r.reply(proto::Pong{MUSTER_VERSION, static_cast<int64_t>(::getpid())});
       }},
      {MsgType::kJoin,
       [](State& s, const Request& r) {
         auto m = r.unpack<proto::Join>();
         const int64_t owner = r.scope.owner;
         auto info = s.jobs_.join(m, owner, s.access_.slurm_narrow(m.pid, owner, m.wants_gpu, {}));
         info.job = r.scope.spoken();
         r.reply(info);
       }},
      {MsgType::kLeave,
       [](State& s, const Request& r) {
         s.leave(r.unpack<proto::Leave>(), r.out);
         r.reply(proto::Ok{});
       }},
      {MsgType::kReserve,
       [](State& s, const Request& r) {
         auto m = r.unpack<proto::Reserve>();
         const int64_t owner = r.scope.owner;
         m.devices =
             s.access_.slurm_narrow(m.launcher_pid, owner, m.wants_gpu, std::move(m.devices));
         r.reply(s.jobs_.reserve(m, owner));
       }},
      {MsgType::kAttach,
       [](State& s, const Request& r) {
         s.jobs_.attach(r.unpack<proto::Attach>());
         r.reply(proto::Ok{});
       }},
      {MsgType::kStatus,
       [](State& s, const Request& r) {
         auto m = r.unpack<proto::Status>();
         // One job that spans nodes: its coordinator has the job-wide
         // waits (the reply goes when they come: MultiNode).
         const Job* job = m.job.empty() ? nullptr : s.jobs_.find(job_key(r.to.peer_uid, m.job));
         if (job && job->visible_to(r.to.peer_uid) && job->cluster && job->cluster->formed &&
             s.cluster_side().ask_job_waits(r.to, *job, r.out))
           return;
         r.reply(s.reports_.status(r.to.peer_uid, m.job));
       }},
      {MsgType::kGpuDrain,
       [](State& s, const Request& r) { s.gpus_.drain(r.to, r.unpack<proto::GpuDrain>(), r.out); }},
      {MsgType::kShard, [](State& s, const Request& r) { s.samplers_.shard(r); }},
      {MsgType::kRendezvous,
       [](State& s, const Request& r) { s.cluster_side().rendezvous(r.to, r.env, r.out); }},
      {MsgType::kClusterState,
       [](State& s, const Request& r) {
         auto m = r.unpack<proto::ClusterState>();
         r.reply(proto::ClusterStateReply{s.cluster_side().cluster_state(m.job)});
       }},
      {MsgType::kBarrier, [](State& s, const Request& r) { s.stores_.barrier(r); }},
      {MsgType::kStoreSet, [](State& s, const Request& r) { s.stores_.set(r); }},
      {MsgType::kStoreGet, [](State& s, const Request& r) { s.stores_.get(r); }},
      {MsgType::kStoreAdd, [](State& s, const Request& r) { s.stores_.add(r); }},
      {MsgType::kStoreCompareSet, [](State& s, const Request& r) { s.stores_.compare_set(r); }},
      {MsgType::kStoreDelete, [](State& s, const Request& r) { s.stores_.erase(r); }},
      {MsgType::kStoreWait, [](State& s, const Request& r) { s.stores_.wait(r); }},
      {MsgType::kStoreNumKeys, [](State& s, const Request& r) { s.stores_.num_keys(r); }},
      {MsgType::kStoreListKeys, [](State& s, const Request& r) { s.stores_.list_keys(r); }},
      {MsgType::kStoreAppend, [](State& s, const Request& r) { s.stores_.append(r); }},
      {MsgType::kStoreMultiSet, [](State& s, const Request& r) { s.stores_.multi_set(r); }},
      {MsgType::kStoreMultiGet, [](State& s, const Request& r) { s.stores_.multi_get(r); }},
      {MsgType::kStoreQueuePush, [](State& s, const Request& r) { s.stores_.queue_push(r); }},
      {MsgType::kStoreQueuePop, [](State& s, const Request& r) { s.stores_.queue_pop(r); }},
      {MsgType::kStoreQueueLen, [](State& s, const Request& r) { s.stores_.queue_len(r); }},
  };
  return rows;
}

namespace {

// Both parts of the column, indexed by type: built once.
struct Column {
  std::vector<const Handler*> by_type;
  std::vector<std::string> gaps;  // what handler_gaps() says
};

Column make_column(std::span<const Handler> local, std::span<const Handler> peer) {
  Column c;
  auto add = [&c](const Handler& h) {
    const auto i = static_cast<size_t>(h.type);
    if (c.by_type.size() <= i) c.by_type.resize(i + 1, nullptr);
    const proto::MessageTraits* t = proto::message_traits(static_cast<uint16_t>(h.type));
    if (c.by_type[i])
      c.gaps.push_back("two handlers for type " + std::to_string(i));
    else if (!t || t->sender == proto::Sender::kNone)
      c.gaps.push_back("a handler for type " + std::to_string(i) + ", which is no request");
    c.by_type[i] = &h;
  };
  for (const Handler& h : local) add(h);
  for (const Handler& h : peer) add(h);
  for (const proto::MessageTraits& t : proto::message_table()) {
    const auto i = static_cast<size_t>(t.type);
    if (t.sender != proto::Sender::kNone && (i >= c.by_type.size() || !c.by_type[i]))
      c.gaps.push_back(std::string("no handler for '") + t.name + "'");
  }
  return c;
}

const Column& column(std::span<const Handler> local, std::span<const Handler> peer) {
  static const Column c = make_column(local, peer);
  return c;
}

}  // namespace

std::vector<std::string> State::handler_gaps() {
  return column(local_handlers(), peer_handlers()).gaps;
}

void State::dispatch(const Request& r) {
  const auto& by_type = column(local_handlers(), peer_handlers()).by_type;
  const auto i = static_cast<size_t>(r.t.type);
  // admit() lets through only the types of the message table that are
  // requests, and handler_gaps() (checked at start) found a row for each.
  if (i >= by_type.size() || !by_type[i])
    throw Error(ErrorCode::kInternal, std::string("no handler for '") + r.t.name + "'");
  by_type[i]->handle(*this, r);
}

}  // namespace muster::daemon
