// State's hooks into its multi-node side: what the core asks of it without
// seeing its types.
#include "cluster/multi_node.hpp"
#include "cluster/route.hpp"

#include "core/state.hpp"
#include "job_id.hpp"

#include <algorithm>
#include <iterator>

#include "log.hpp"

namespace muster::daemon {

MultiNode* State::new_multi_node() {
  return new MultiNode(store_, jobs_, [this](int64_t viewer, const std::string& job) {
    return reports_.status(viewer, job);
  });
}

void State::MultiNodeDelete::operator()(MultiNode* t) const {
  delete t;
}

ClusterView& State::cluster_view() {
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

Job* State::global_store(const std::string& id) {
  return cluster_->coordinator.global_store(id);
}

void State::keep_link(const std::string& coordinator) {
  cluster_->node.keep(coordinator);
}

void State::status_request(const ReplyTo& to, const proto::Status& m, std::vector<Outgoing>& out) {
  // One job that spans nodes: its coordinator has the job-wide waits.
  if (const Job* job = m.job.empty() ? nullptr : jobs_.find(job_key(to.peer_uid, m.job));
      job && job->visible_to(to.peer_uid) && job->cluster && job->cluster->formed &&
      cluster_->node.ask_job_waits(to, *job, out))
    return;
  reply(to, reports_.status(to.peer_uid, m.job), out);
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

void State::rendezvous(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out) {
  cluster_->node.rendezvous(to, env, out);
}

void State::cluster_slot_ended(Job& job, uint32_t local_rank, const char* why,
                               std::vector<Outgoing>& out) {
  cluster_->node.slot_ended(job, local_rank, why, out);
}

void State::cluster_job_removed(Job& job, std::vector<Outgoing>& out) {
  cluster_->node.job_removed(job, out);
}

}  // namespace muster::daemon
