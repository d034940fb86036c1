// Requests of peer daemons, decoded and handed to the coordinator, or (a
// Forward) to the store, broadcast and sampler handlers for the one job the
// Forward was checked for.
#include "cluster/tables.hpp"
#include "core/state.hpp"

namespace muster::daemon {

using proto::MsgType;

void State::peer_request(const ReplyTo& to, const proto::Envelope& env,
                         std::vector<Outgoing>& out) {
  switch (static_cast<MsgType>(env.type)) {
    case MsgType::kNodeJoin: {
      auto m = proto::NodeJoin::unpack(env.payload);
      if (m.relay) return cluster_->node.relay_join(to, std::move(m), out);
      return cluster_->coordinator.node_join(to, m, jobs_.all(), out);
    }
    case MsgType::kNodeJoins:
      cluster_->coordinator.node_joins(to, proto::NodeJoins::unpack(env.payload), jobs_.all(), out);
      return reply(to, proto::Ok{}, out);
    case MsgType::kForward: {
      auto f = proto::Forward::unpack(env.payload);
      if (f.relay) return cluster_->node.relay_from_child(to, env, out);
      return forward_in(to, f, out);
    }
    case MsgType::kBarrierUp: {
      auto b = proto::BarrierUp::unpack(env.payload);
      if (b.relay) return cluster_->node.relay_from_child(to, env, out);
      return cluster_->coordinator.barrier_up(to, b, out);
    }
    case MsgType::kHeartbeat: {
      auto m = proto::Heartbeat::unpack(env.payload);
      if (m.relay) return reply(to, cluster_->node.relay_heartbeat(m), out);
      return reply(to, cluster_->coordinator.heartbeat(m, out), out);
    }
    case MsgType::kJobWaits:
      return reply(to, cluster_->coordinator.job_waits(proto::JobWaits::unpack(env.payload)), out);
    case MsgType::kRankExited: {
      auto m = proto::RankExited::unpack(env.payload);
      if (m.relay)
        cluster_->node.relay_exited(m, out);  // refused: thrown, an error reply
      else
        cluster_->coordinator.rank_exited(m, out);
      return reply(to, proto::Ok{}, out);
    }
    case MsgType::kNodeLeave: {
      auto m = proto::NodeLeave::unpack(env.payload);
      if (m.relay)
        cluster_->node.relay_leave(m);  // refused: thrown, an error reply
      else
        cluster_->coordinator.node_leave(m, out);
      return reply(to, proto::Ok{}, out);
    }
    default:
      fail(to, ErrorCode::kUnknownType,
           std::string("message type '") + proto::type_name(env.type) +
               "' is not something a peer daemon may ask",
           out);
  }
}

void State::forward_in(const ReplyTo& to, const proto::Forward& m, std::vector<Outgoing>& out) {
  cluster_->coordinator.live_round(m.job, m.generation, "request");
  auto inner = proto::decode_envelope(m.frame.data(), m.frame.size(), true);  // m outlives it
  ReplyTo inner_to = to;
  inner_to.request_id = to.request_id;
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
  switch (t->area) {
    case proto::Area::kBarrier:
      return barrier(inner_to, proto::Barrier::unpack(inner.payload), out);
    case proto::Area::kStore:
      return store_request(inner_to, inner, out);
    case proto::Area::kBcast:
      return bcast_request(inner_to, inner, out);
    case proto::Area::kShard:  // sampler_commit, sampler_resume: the run's progress
      return cluster_->coordinator.sampler_request(inner_to, inner, forwarding_job_, out);
    default:
      throw Error(ErrorCode::kInternal, std::string("no handler for forwarded '") + t->name + "'");
  }
}

void State::bcast_request(const ReplyTo& to, const proto::Envelope& env,
                          std::vector<Outgoing>& out) {
  Coordinator& c = cluster_->coordinator;
  switch (static_cast<MsgType>(env.type)) {
    case MsgType::kBcastPush:
      return c.bcast_push(to, proto::BcastPushView::unpack(env.payload), forwarding_job_, out);
    case MsgType::kBcastPull:
      return c.bcast_pull(to, proto::BcastPull::unpack(env.payload), forwarding_job_, out);
    case MsgType::kBcastLeave:
      return c.bcast_leave(to, proto::BcastLeave::unpack(env.payload), forwarding_job_, out);
    default:
      throw Error(ErrorCode::kInternal, "not a broadcast request");
  }
}

}  // namespace muster::daemon
