// The dispatcher's rows for what spans nodes (core/dispatch.cpp holds the
// rest): the requests of peer daemons, decoded and handed to the
// coordinator or to this node's relay; a Forward, unwrapped once and its
// inner request dispatched through the same column, for the one job the
// Forward was checked for; and the broadcast and sampler requests, which a
// peer forwards to the coordinator of their job. Then State's other
// methods that reach into the multi-node side: making it, looping back the
// requests to the coordinator in this daemon, and route_away, which sends
// a request where route() says.
#include <algorithm>
#include <iterator>

#include "cluster/multi_node.hpp"
#include "cluster/route.hpp"
#include "core/state.hpp"
#include "job_id.hpp"
#include "log.hpp"
#include "protocol/sampler_messages.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

// A broadcast request for a job of this node only: always an error.
[[noreturn]] void refuse_local_bcast(const JobTable& jobs, const Request& r) {
  const proto::Envelope& env = r.env;
  const proto::MessageTraits& t = r.t;
  // A job on one node broadcasts through shared memory (client/lib). An
  // absent job is unknown_job, as for every other request, so that a job
  // hidden from the sender (access.cpp) is answered alike.
  const std::string job = codec::MapReader(env.payload, t.name).str("job", 256);
  jobs.get(job);
  throw Error(ErrorCode::kInvalidArgument, std::string("'") + t.name +
                                               "' is for jobs that span nodes, which job '" + job +
                                               "' on this daemon is not");
}

}  // namespace

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
         if (f.relay) return s.cluster_->node.relays().from_child(r.to, r.env, r.out);
         s.forward_in(r.to, f, r.out);
       }},
      {MsgType::kBarrierUp,
       [](State& s, const Request& r) {
         auto b = r.unpack<proto::BarrierUp>();
         if (b.relay) return s.cluster_->node.relays().from_child(r.to, r.env, r.out);
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
           s.cluster_->node.notices().exited(m, r.out);  // refused: thrown, an error reply
         else
           s.cluster_->coordinator.rank_exited(m, r.out);
         r.reply(proto::Ok{});
       }},
      {MsgType::kNodeLeave,
       [](State& s, const Request& r) {
         auto m = r.unpack<proto::NodeLeave>();
         if (m.relay)
           s.cluster_->node.notices().leave(m);  // refused: thrown, an error reply
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
         if (s.forwarding_job_.empty()) refuse_local_bcast(s.jobs_, r);
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
         if (s.forwarding_job_.empty()) refuse_local_bcast(s.jobs_, r);
         s.cluster_->coordinator.bcast_pull(r.to, r.unpack<proto::BcastPull>(), s.forwarding_job_,
                                            r.out);
       }},
      {MsgType::kBcastLeave,
       [](State& s, const Request& r) {
         if (s.forwarding_job_.empty()) refuse_local_bcast(s.jobs_, r);
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

MultiNode* State::new_multi_node() {
  return new MultiNode(store_, jobs_, [this](int64_t viewer, const std::string& job) {
    return reports_.status(viewer, job);
  });
}

void State::MultiNodeDelete::operator()(MultiNode* t) const {
  delete t;
}

ClusterSide& State::cluster_side() {
  return *cluster_;
}

size_t State::job_count() const {
  return jobs_.size() + cluster_->coordinator.size();
}

// Requests of this node to the coordinator in this daemon, and its answers,
// handled here before the round's save and its replies: a kill -9 then
// keeps both sides' work or neither (the coordinator answered node 0's
// forwarded add, say, and node 0's rank got that answer), and node 0's
// requests skip the loopback TCP. Answers to parked requests come in later
// rounds and are looped back then. Bounded: an answer never asks again.
void State::loop_back(std::vector<Outgoing>& out) {
  for (int pass = 0; pass < 8; ++pass) {
    auto here = std::stable_partition(out.begin(), out.end(),
                                      [](const Outgoing& o) { return !o.here && !o.to.here; });
    if (here == out.end()) return;
    std::vector<Outgoing> batch(std::make_move_iterator(here), std::make_move_iterator(out.end()));
    out.erase(here, out.end());
    for (auto& o : batch) {
      if (o.here) {
        ReplyTo to;
        to.routing_id = std::string(1, '\0') + o.link;  // untracked by the reply cache
        to.from_peer = true;
        to.here = true;
        try {
          auto env = proto::decode_envelope(o.frame.data(), o.frame.size(), true);
          to.request_id = env.request_id;
          handle(to, env, out);  // env points into o.frame, alive until the next o
        } catch (const proto::EnvelopeError& e) {
          log::error(std::string("a request to the coordinator here did not decode: ") + e.what());
        }
      } else {
        std::string_view body = o.frame.empty() ? o.body : std::string_view(o.frame);
        cluster_->on_link_frame(o.to.routing_id.substr(1), const_cast<char*>(body.data()),
                                body.size(), out, o.held);
      }
    }
  }
}

bool State::route_away(const Request& r) {
  Job* job = jobs_.find(r.scope.key);
  const Route where = route(r, job, cluster_->coordinator, cluster_->node);
  switch (where) {
    case Route::kServeHere:
      return false;
    case Route::kCoordinatorHere:
      bcast_here(r, *job);
      return true;
    default:
      cluster_->node.send_on(where, r.to, *job, r.env, r.out);
      return true;
  }
}

// A broadcast of a job coordinated by this same daemon (route.cpp says
// when), served by the coordinator here through the dispatcher's rows
// (peer_requests.cpp). The checks are forward_in's: the round is live, at
// this generation.
void State::bcast_here(const Request& r, const Job& job) {
  Coordinator& c = cluster_->coordinator;
  c.live_round(job.id, job.generation, "request");
  forwarding_job_ = job.id;
  struct Reset {
    std::string& s;
    ~Reset() { s.clear(); }
  } reset{forwarding_job_};
  const JobScope none;  // the job is forwarding_job_, checked by route()
  dispatch(Request{r.to, r.env, r.t, none, r.out});
}

}  // namespace muster::daemon
