// The dispatcher's rows for what spans nodes (core/dispatch.cpp holds the
// rest): the requests of peer daemons, decoded and handed to the
// coordinator or to this node's relay; a Forward, unwrapped once and its
// inner request dispatched through the same column, for the one job the
// Forward was checked for; and the broadcast and sampler requests, which a
// peer forwards to the coordinator of their job.
#include "cluster/multi_node.hpp"
#include "core/state.hpp"
#include "protocol/sampler_messages.hpp"

namespace muster::daemon {

using proto::MsgType;

// Longer than 80 lines because it is a table: one row a message type, each
// row's handler a few lines of decoding and a call.
std::span<const Handler> State::peer_handlers() {
  static const Handler rows[] = {
      {MsgType::kNodeJoin,
       [](State& s, const Request& r) {
         auto m = r.unpack<proto::NodeJoin>();
         if (m.relay) return s.cluster_->node.relay_join(r.to, std::move(m), r.out);
         s.cluster_->coordinator.node_join(r.to, m, s.jobs_.all(), r.out);
       }},
      {MsgType::kNodeJoins,
       [](State& s, const Request& r) {
         s.cluster_->coordinator.node_joins(r.to, r.unpack<proto::NodeJoins>(), s.jobs_.all(),
                                            r.out);
         r.reply(proto::Ok{});
       }},
      {MsgType::kForward,
       [](State& s, const Request& r) {
         auto f = r.unpack<proto::Forward>();
         if (f.relay) return s.cluster_->node.relay_from_child(r.to, r.env, r.out);
         s.forward_in(r.to, f, r.out);
       }},
      {MsgType::kBarrierUp,
       [](State& s, const Request& r) {
         auto b = r.unpack<proto::BarrierUp>();
         if (b.relay) return s.cluster_->node.relay_from_child(r.to, r.env, r.out);
         s.cluster_->coordinator.barrier_up(r.to, b, r.out);
       }},
      {MsgType::kHeartbeat,
       [](State& s, const Request& r) {
         auto m = r.unpack<proto::Heartbeat>();
         if (m.relay) return r.reply(s.cluster_->node.relay_heartbeat(m));
         r.reply(s.cluster_->coordinator.heartbeat(m, r.out));
       }},
      {MsgType::kJobWaits,
       [](State& s, const Request& r) {
         r.reply(s.cluster_->coordinator.job_waits(r.unpack<proto::JobWaits>()));
       }},
      {MsgType::kRankExited,
       [](State& s, const Request& r) {
         auto m = r.unpack<proto::RankExited>();
         if (m.relay)
           s.cluster_->node.relay_exited(m, r.out);  // refused: thrown, an error reply
         else
           s.cluster_->coordinator.rank_exited(m, r.out);
         r.reply(proto::Ok{});
       }},
      {MsgType::kNodeLeave,
       [](State& s, const Request& r) {
         auto m = r.unpack<proto::NodeLeave>();
         if (m.relay)
           s.cluster_->node.relay_leave(m);  // refused: thrown, an error reply
         else
           s.cluster_->coordinator.node_leave(m, r.out);
         r.reply(proto::Ok{});
       }},
      // Broadcast across nodes is served by the coordinator of its job, for
      // the job a Forward was checked for (forward_in) or that bcast_here
      // found coordinated here (forwarding_job_). A job of this node only
      // broadcasts through shared memory (client/lib): refused.
      {MsgType::kBcastPush,
       [](State& s, const Request& r) {
         if (s.forwarding_job_.empty()) s.refuse_local_bcast(r.env, r.t);
         // A local rank's push at a coordinator here (bcast_here) is read
         // from its pool straight into the chunk's frame; a peer's has its
         // bytes (a pool names a file of the node it came from).
         auto push = proto::BcastPushView::unpack(r.env.payload);
         std::shared_ptr<PoolFile> from;
         if (!r.to.from_peer && push.pool.set())
           from = s.cluster_->node.open_pool(r.to, push.pool, push.pool.offset + push.size, false);
         s.cluster_->coordinator.bcast_push(r.to, push, s.forwarding_job_, r.out, from.get());
       }},
      {MsgType::kBcastPull,
       [](State& s, const Request& r) {
         if (s.forwarding_job_.empty()) s.refuse_local_bcast(r.env, r.t);
         s.cluster_->coordinator.bcast_pull(r.to, r.unpack<proto::BcastPull>(), s.forwarding_job_,
                                            r.out);
       }},
      {MsgType::kBcastLeave,
       [](State& s, const Request& r) {
         if (s.forwarding_job_.empty()) s.refuse_local_bcast(r.env, r.t);
         s.cluster_->coordinator.bcast_leave(r.to, r.unpack<proto::BcastLeave>(), s.forwarding_job_,
                                             r.out);
       }},
      // A resumable sampler's progress: the node's own, or, forwarded, the
      // run's at its coordinator (coord_samplers.cpp).
      {MsgType::kSamplerCommit,
       [](State& s, const Request& r) {
         if (s.forwarding_job_.empty()) return s.samplers_.commit(r);
         auto m = r.unpack<proto::SamplerCommit>();
         // forward_in found the round live at the Forward's generation.
         Coordinator& c = s.cluster_->coordinator;
         const Job* global = c.global_store(s.forwarding_job_);
         const uint32_t world = global ? global->global_world_size : 0;
         c.samplers().commit(r.to, m, s.forwarding_job_, world, r.out);
       }},
      {MsgType::kSamplerResume,
       [](State& s, const Request& r) {
         if (s.forwarding_job_.empty()) return s.samplers_.resume(r);
         s.cluster_->coordinator.samplers().resume(r.to, r.unpack<proto::SamplerResume>(),
                                                   s.forwarding_job_, r.out);
       }},
  };
  return rows;
}

void State::forward_in(const ReplyTo& to, const proto::Forward& m, std::vector<Outgoing>& out) {
  cluster_->coordinator.live_round(m.job, m.generation, "request");
  auto inner = proto::decode_envelope(m.frame.data(), m.frame.size(), true);  // m outlives it
  // The inner request may only touch the job the Forward was checked for.
  forwarding_job_ = m.job;
  struct Reset {
    std::string& s;
    ~Reset() { s.clear(); }
  } reset{forwarding_job_};
  const proto::MessageTraits* t = proto::message_traits(inner.type);
  if (!t || !t->forwardable)
    throw Error(ErrorCode::kUnknownType,
                std::string("a peer may not forward '") + (t ? t->name : "?") + "'");
  const JobScope none;  // the job is the Forward's, checked by store_job and the coordinator
  dispatch(Request{to, inner, *t, none, out});
}

}  // namespace muster::daemon
