// The coordinator side of multi-node jobs (torchrun's c10d rendezvous
// host): per job, the rounds of NodeJoin that form each generation's world,
// the job's global store (whose waits the core's Store keeps), node
// liveness by heartbeat, the relay of broadcasts across nodes
// (RelayedBroadcasts), and the progress of the job's resumable samplers
// (CoordSamplers).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cluster/broadcast/relayed_broadcasts.hpp"
#include "cluster/cluster.hpp"
#include "cluster/coord_samplers.hpp"
#include "core/out_answers.hpp"
#include "core/store.hpp"
#include "protocol/cluster_messages.hpp"

namespace muster::daemon {

// Where each node of a forming world sends its barriers and key waits, by
// node rank: its parent's node rank (-1: the coordinator), and the ranks of
// its subtree (its own and its children's). Empty: a flat star.
struct RelayTree {
  std::vector<int64_t> parent;
  std::vector<uint32_t> subtree;
};
RelayTree relay_tree(const std::vector<RoundNode*>& order, uint32_t width);

class Coordinator {
 public:
  explicit Coordinator(Store& store) : store_(store) {}
  // bcasts_ refers to members of this object.
  Coordinator(const Coordinator&) = delete;
  Coordinator& operator=(const Coordinator&) = delete;

  // How long a silent node may stay silent; children per daemon in the
  // relay tree (0 = a flat star).
  void configure(std::chrono::milliseconds peer_timeout, uint32_t tree_width) {
    peer_timeout_ = peer_timeout;
    tree_width_ = tree_width;
  }
  // Empty once no round is left and no sampler progress lingers (ticks
  // are needed until it expires).
  bool empty() const { return rounds_.empty() && !samplers_.lingering(); }
  // Rounds that count as work (an embedded daemon stays while any does):
  // all but those restored that no node has come back to yet.
  size_t size() const;
  // The rounds of the jobs coordinated here, by job id (for the metrics).
  const std::map<std::string, CoordJob>& rounds() const { return rounds_; }
  // Whether the world of `job` at `generation` is formed here and has this
  // daemon (node_id) among its nodes: its requests need no connection.
  bool has_node(const std::string& job, uint64_t generation, const std::string& node_id) const;
  // A round as the state file saved it (coord_liveness.cpp): its nodes
  // count as heard from now, and the broadcasts it had started are over.
  void restore(const std::string& job, CoordJob cj);
  // True once after a change that must reach the disk although no reply
  // acknowledges it (a broadcast started: its number is saved).
  bool take_save_wanted() { return std::exchange(save_wanted_, false); }
  // A node of the round was heard from, and rounds no node came back to
  // (coord_liveness.cpp).
  CoordJob& heard(CoordJob& cj);
  // An open round restored after a restart has nodes that have not joined
  // again yet: it may not close.
  static bool awaiting_restored(const CoordJob& cj);
  void drop_quiet(Clock::time_point now);
  // The global store of a job coordinated here, if any.
  Job* global_store(const std::string& job);
  // The round of a job coordinated here whose world is formed and healthy
  // at `generation`, for a request (`what`) from a node of it; throws Error
  // otherwise.
  CoordJob& live_round(const std::string& job, uint64_t generation, const std::string& what);

  // Requests of node daemons. local_jobs: this daemon's own jobs (one of
  // the same name must belong to the same uid).
  // batched: it came in a relay's NodeJoins (its World goes back with the
  // others of that relay).
  void node_join(const ReplyTo& to, const proto::NodeJoin& m,
                 const std::map<std::string, Job>& local_jobs, std::vector<Outgoing>& out,
                 bool batched = false);
  // A relay's batch of its children's joins (coordinator.cpp): each taken
  // as if it came alone, under its own request id; one refused is answered
  // with an error reply and changes nothing.
  void node_joins(const ReplyTo& to, const proto::NodeJoins& m,
                  const std::map<std::string, Job>& local_jobs, std::vector<Outgoing>& out);
  void barrier_up(const ReplyTo& to, const proto::BarrierUp& m, std::vector<Outgoing>& out);
  proto::HeartbeatAck heartbeat(const proto::Heartbeat& m, std::vector<Outgoing>& out);
  // The job's open barriers and key waits across all its nodes, from what
  // each node's last heartbeat said (coord_waits.cpp).
  proto::JobWaitsReply job_waits(const proto::JobWaits& m) const;
  // The same for the daemon itself (its stuck lines); empty while the
  // job's round forms.
  std::vector<proto::WaitStatus> job_waits_of(const std::string& job) const;
  void rank_exited(const proto::RankExited& m, std::vector<Outgoing>& out);
  void node_leave(const proto::NodeLeave& m, std::vector<Outgoing>& out);
  // Broadcast requests, inside a Forward for `forwarding` (the only job
  // they may touch).
  // from: the root's pool, which holds the chunk's bytes (its rank named
  // it, and this daemon is the root's: State::bcast_here).
  void bcast_push(const ReplyTo& to, const proto::BcastPushView& m, const std::string& forwarding,
                  std::vector<Outgoing>& out, const PoolFile* from = nullptr);
  void bcast_pull(const ReplyTo& to, const proto::BcastPull& m, const std::string& forwarding,
                  std::vector<Outgoing>& out);
  void bcast_leave(const ReplyTo& to, const proto::BcastLeave& m, const std::string& forwarding,
                   std::vector<Outgoing>& out);
  // The resumable samplers' progress of the jobs coordinated here
  // (sampler_commit and sampler_resume, forwarded).
  CoordSamplers& samplers() { return samplers_; }
  const SamplerProgress& sampler_progress() const { return samplers_.progress(); }
  // Lost nodes, last calls, rendezvous and broadcast timeouts.
  void tick(Clock::time_point now, std::vector<Outgoing>& out);

 private:
  template <class M>
  void reply(const ReplyTo& to, const M& m, std::vector<Outgoing>& out) {
    send_reply(out, to, m);
  }
  void fail(const ReplyTo& to, ErrorCode code, const std::string& why, std::vector<Outgoing>& out) {
    send_error(out, to, code, why);
  }
  // in_nodes, in_waiting: whether the asking node is in the round's nodes
  // and in its waiting list (found by the caller, through the index).
  proto::JobEvent event_for(const CoordJob& cj, const std::string& id, bool in_nodes,
                            bool in_waiting, uint64_t generation) const;
  void close_round(CoordJob& cj, std::vector<Outgoing>& out);
  // The Worlds of a closing round: alone, or (batched joins) in one
  // Replies per relay connection.
  struct WorldsOut {
    std::map<std::string, std::pair<ReplyTo, proto::Replies>> batches;  // by routing id
    void add(const RoundNode& node, const proto::World& w, std::vector<Outgoing>& out);
    void send(std::vector<Outgoing>& out);
  };
  // A relay's heartbeat: its subtree's liveness and leaves (coord_liveness.cpp).
  bool relayed(CoordJob& cj, const proto::JobGeneration& jg, Clock::time_point now);
  // A node's part of the job ended (true when that is news); the round
  // ends once every node's has.
  bool mark_left(CoordJob& cj, const std::string& job, uint64_t generation,
                 const std::string& node_id);
  void maybe_ended(const std::string& job, std::vector<Outgoing>& out);
  // The round's new world is formed: what the generation before left goes.
  void generation_formed(CoordJob& cj, std::vector<Outgoing>& out);
  std::vector<proto::WaitStatus> merged_waits(const CoordJob& cj) const;
  void break_round(CoordJob& cj, const std::string& why, std::vector<Outgoing>& out,
                   bool fail_waiters = true);
  void fail_store_waiters(Job& store, ErrorCode code, const std::string& why,
                          std::vector<Outgoing>& out);
  void rounds_tick(Clock::time_point now, std::vector<Outgoing>& out);
  // The round a broadcast request is for: forwarded for that job, of its
  // current generation.
  CoordJob& bcast_job(const std::string& job, uint64_t generation, const std::string& forwarding);

  Store& store_;
  std::map<std::string, CoordJob> rounds_;  // by job id
  CoordSamplers samplers_;                  // resumable samplers' progress (coord_samplers.hpp)
  std::chrono::milliseconds peer_timeout_{10000};
  uint32_t tree_width_ = 16;
  bool save_wanted_ = false;
  // The broadcasts relayed through this coordinator (after what it refers
  // to).
  RelayedBroadcasts bcasts_{rounds_, store_, save_wanted_};
};

}  // namespace muster::daemon
