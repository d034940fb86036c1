// The node side of multi-node jobs: this daemon's links to the coordinators
// of its jobs (requests in flight, heartbeats, silence) and its relays in
// their trees. It reads and updates the jobs' ClusterInfo in the JobTable;
// the stores stay with the coordinator.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "cluster/broadcast/bcast_chain.hpp"
#include "cluster/broadcast/chain_broadcasts.hpp"
#include "cluster/broadcast/pool_files.hpp"
#include "cluster/cluster.hpp"
#include "cluster/notices.hpp"
#include "cluster/relays.hpp"
#include "cluster/route.hpp"
#include "core/job_table.hpp"
#include "core/waits.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"

namespace muster::daemon {

class NodeLinks : private ChainBroadcasts::Links, private Relays::Links {
 public:
  explicit NodeLinks(JobTable& jobs) : jobs_(jobs) {}
  NodeLinks(const NodeLinks&) = delete;
  NodeLinks& operator=(const NodeLinks&) = delete;

  // This daemon's name among its peers, how long a silent coordinator may
  // stay silent, and why this daemon cannot peer ("" = it can).
  void configure(std::string node_id, std::chrono::milliseconds peer_timeout,
                 std::string unavailable);
  // host:port of our peer listener, told to coordinators for the tree.
  void set_peer_endpoint(std::string endpoint) { peer_endpoint_ = std::move(endpoint); }
  void set_name(std::string name) { node_name_ = std::move(name); }
  // The links (distinct coordinators and relays) one uid's jobs may name,
  // and all jobs together; 0 = no cap.
  void set_link_caps(size_t per_uid, size_t total) {
    links_per_uid_ = per_uid;
    links_total_ = total;
  }
  static constexpr size_t kLinksPerUid = 32;

  const std::string& node_id() const { return node_id_; }
  bool has_link(const std::string& link) const { return links_.count(link) != 0; }
  // Links to keep, or children's leaves to pass on once this node's part ended.
  bool active() const {
    // Open pools too: their expiry (tick) closes them, so a dead rank's
    // memory is not held on after the daemon's last job.
    return !links_.empty() || notices_.active() || !joins_.empty() || pools_.size() != 0;
  }
  // The links to coordinators, by host:port (for the metrics).
  const std::map<std::string, Link>& links() const { return links_; }
  // Whether `link` is the coordinator of `job` in this same daemon, with
  // this node in its formed world: requests to it are then handled in
  // process (State::loop_back), so that what both sides did is saved
  // together and a restart cannot keep one side's half.
  void set_here(std::function<bool(const std::string& link, const std::string& job)> f) {
    here_ = std::move(f);
  }
  // A node's part of a multi-node job keeps a link to its coordinator.
  void keep(const std::string& coordinator) { links_[coordinator]; }

  // A local rank's request for a job that spans nodes, sent the way
  // route() (route.hpp) chose: relayed, along the chain, or forwarded
  // upstream (node.cpp).
  void send_on(Route where, const ReplyTo& to, Job& job, const proto::Envelope& env,
               std::vector<Outgoing>& out) override;
  // The relay tree as this node serves it (relays.hpp): children's
  // requests, kept set-once keys, the relayed waits.
  Relays& relays() { return relays_; }
  // A child's NodeLeave or RankExited (relay set), batched (notices.hpp).
  Notices& notices() { return notices_; }
  const Relays& relays() const { return relays_; }
  void rendezvous(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out);
  proto::JobEvent cluster_state(const std::string& job) const;
  // A child daemon's Heartbeat or NodeLeave (relay set), taken into this
  // node's next heartbeat (beats.cpp). A job this node cannot speak for is
  // answered "ask_coordinator" (heartbeat) or refused (leave): the child
  // tells the coordinator itself.
  proto::HeartbeatAck relay_heartbeat(const proto::Heartbeat& m);
  // A child daemon's NodeJoin (relay set): held, and passed on to the
  // job's coordinator in a NodeJoins with the others (joins.cpp).
  void relay_join(const ReplyTo& to, proto::NodeJoin m, std::vector<Outgoing>& out);
  // A frame from the coordinator at `link` (the answer to something sent).
  // `held` keeps data alive (may be null): a bcast_chunk answer goes on
  // to the local rank as it is, its request id rewritten in place.
  void on_link_frame(const std::string& link, void* data, size_t size, std::vector<Outgoing>& out,
                     std::shared_ptr<void> held = {});
  // What a local slot's or job's end means upstream.
  void slot_ended(Job& job, uint32_t local_rank, const char* why, std::vector<Outgoing>& out);
  void job_removed(Job& job, std::vector<Outgoing>& out);
  // The link to `link` connected again (its coordinator restarted, say):
  // every request in flight on it goes again, under the same id; the
  // coordinator's reply cache answers those it had answered. Broadcast
  // requests fail with `restarted` (their chunks died with it).
  void resend(const std::string& link, std::vector<Outgoing>& out);
  // A local rank's broadcast pool (to: its request), see pool_files.hpp.
  std::shared_ptr<PoolFile> open_pool(const ReplyTo& to, const proto::PoolRef& ref, uint64_t end,
                                      bool write) override {
    return pools_.open(to.peer_pid, to.peer_uid, ref, end, write);
  }
  // Heartbeats, lost coordinators, links no longer needed.
  void tick(Clock::time_point now, std::vector<Outgoing>& out);

  // Asks the job's coordinator for the job's waits across its nodes, for
  // a local status (to); false when its link is lost. The answers are
  // taken with take_job_waits().
  bool ask_job_waits(const ReplyTo& to, const Job& job, std::vector<Outgoing>& out);
  std::vector<JobWaitsAnswer> take_job_waits() { return std::move(job_waits_); }

 private:
  // Whether a rendezvous of the job waits for its World.
  bool joining(const std::string& job) const;
  // Throws invalid_argument when m's coordinator or via is no HOST:PORT,
  // and quota_exceeded when its links would take the job's owner or the
  // daemon past its cap (set_link_caps).
  void check_links(const Job& job, const proto::Rendezvous& m) const;
  // NodeJoin::run of this node's part of the job.
  std::string run_of(const Job& job) const;
  // Sends m to the coordinator at `link` and remembers what to do with
  // its answer.
  template <class M>
  uint64_t send_link(const std::string& link, LinkPending p, const M& m,
                     std::vector<Outgoing>& out) {
    return send_link_with(
        link, std::move(p), [&](uint64_t id) { return proto::encode(id, m); }, out);
  }
  // The same with the frame made by make(request id).
  template <class F>
  uint64_t send_link_with(const std::string& link, LinkPending p, F&& make,
                          std::vector<Outgoing>& out) {
    uint64_t id = next_link_id_++;
    std::string frame = make(id);
    p.here = !p.job.empty() && here_ && here_(link, p.job);
    if (p.kind != LinkPending::Kind::kHeartbeat && !p.bcast && !p.here) p.frame = frame;
    Outgoing o{{}, std::move(frame), link};
    o.here = p.here;
    links_[link].pending.emplace(id, std::move(p));
    out.push_back(std::move(o));
    return id;
  }
  static void fail(const ReplyTo& to, ErrorCode code, const std::string& msg,
                   std::vector<Outgoing>& out) {
    out.push_back(
        {to, proto::encode_error(to.request_id, code, msg), {}, static_cast<uint16_t>(code)});
  }

  // A bcast_push or bcast_pull that names its rank's pool (bcast_pools.cpp):
  // sent to the coordinator with the pool's bytes read in, or the chunk to
  // be written there (true); false when it names none.
  bool forward_bcast(const ReplyTo& to, const Job& job, const proto::Envelope& env, LinkPending& p,
                     std::vector<Outgoing>& out);
  // What the chain broadcasts (chain_) send through the links: the
  // ChainBroadcasts::Links this class is (bcast_pools.cpp).
  void send_up(const std::string& link, LinkPending p, const proto::Forward& f,
               std::vector<Outgoing>& out) override;
  bool pulling(const std::string& key) const override;
  void pull_shared(const std::string& link, const std::string& key, LinkPending p,
                   const proto::Forward& f, std::vector<Outgoing>& out) override;
  void fail_in_flight(const std::string& link, const std::string& job, ErrorCode code,
                      const std::string& why, std::vector<Outgoing>& out) override;
  // The answer to such a pull: the chunk into the pool, and a bcast_chunk
  // without its bytes to the rank.
  void pool_answer(const LinkPending& p, const proto::Envelope& env, std::vector<Outgoing>& out);
  // The request id of the shared pull that the bcast_chunk env (request id
  // 0, from `link`) answers, taken off the list; 0 when none.
  uint64_t shared_pull(const std::string& link, const proto::Envelope& env);
  // Drops the ones whose requests are gone (a lost link, a restart).
  void forget_shared_pulls();
  // Passes a bcast_chunk answer on as it is (true), else false.
  bool pass_on(const ReplyTo& to, void* data, size_t size, const proto::Envelope& env,
               std::shared_ptr<void>& held, std::vector<Outgoing>& out);
  // The answers to a node's requests (on_link_frame).
  void world_arrived(const LinkPending& p, const proto::Envelope& env, std::vector<Outgoing>& out);
  void heartbeat_answered(const std::string& link, const LinkPending& p, const proto::Envelope& env,
                          std::vector<Outgoing>& out);
  // Heartbeats (beats.cpp): this node's entry for a job, with what its
  // relay heard from below; parents silent for half the peer timeout are
  // passed over; leaves a parent refused or let wait go to the coordinator;
  // children's leaves that came after this node's own are passed on.
  proto::JobGeneration beat_entry(const Job& job, Clock::time_point now, LinkPending& beat);
  void beat(const std::string& link, Link& l, const std::vector<const Job*>& jobs, bool relay,
            Clock::time_point now, std::vector<Outgoing>& out);
  void pass_over_silent(Clock::time_point now);
  void link_lost(const std::string& link, Link& l, std::vector<Outgoing>& out);
  // Joins through relays (joins.cpp): the batches a relay holds go out;
  // a coordinator's Replies are taken frame by frame; a node whose join
  // went through a relay that refused it, or that the coordinator has not
  // heard of after kViaGrace, joins the coordinator itself.
  void joins_tick(Clock::time_point now, std::vector<Outgoing>& out);
  void flush_joins(const std::string& id, const Job& job, HeldJoins& h, std::vector<Outgoing>& out);
  void on_replies(const std::string& link, const proto::Envelope& env, std::vector<Outgoing>& out);
  void join_answered(const LinkPending& p, const proto::Envelope& env, std::vector<Outgoing>& out);
  void join_direct(const LinkPending& p, const std::string& why, std::vector<Outgoing>& out);
  void maybe_join_direct(const Job& job, Clock::time_point now, std::vector<Outgoing>& out);
  void forming_answered(const Job& job, const proto::JobEvent& e, Clock::time_point now,
                        std::vector<Outgoing>& out);
  // This node's part of the job ended: the children's joins it holds or
  // passed on are answered `unavailable` (they join the coordinator).
  void drop_joins(const std::string& job, std::vector<Outgoing>& out);
  // Forgets every rendezvous of the job in flight, on any link (answered
  // or moot), and when its join was last doubted.
  void drop_rendezvous(const std::string& job);
  static constexpr auto kJoinBatch = std::chrono::milliseconds(20);
  static constexpr auto kJoinHold = std::chrono::seconds(2);
  // Longer than a relay holds a join: one that gave up on its relay does
  // not meet its join again, passed on late.
  static constexpr auto kViaGrace = std::chrono::seconds(3);
  static constexpr size_t kMaxHeldJoins = 8192;  // of all jobs

  // How the relays reach upstream (Relays::Links, node.cpp).
  void send_relayed(const std::string& link, LinkPending p,
                    const std::function<std::string(uint64_t)>& make,
                    std::vector<Outgoing>& out) override {
    send_link_with(link, std::move(p), make, out);
  }
  void forget_relayed(const std::string& job) override;

  JobTable& jobs_;
  std::function<bool(const std::string&, const std::string&)> here_;
  std::map<std::string, Link> links_;       // by coordinator host:port
  std::map<std::string, HeldJoins> joins_;  // by job id: children's joins to pass on
  // By job id: since when the coordinator's answers say it has not heard
  // of this node's join that went through a relay (maybe_join_direct).
  std::map<std::string, Clock::time_point> via_doubt_;
  uint64_t next_link_id_ = 1;
  std::string node_id_;
  std::string node_name_;
  // The coordinator's last word on the rounds our jobs wait in (by job id),
  // and when it came: the last call counts down from then.
  struct FormingSeen {
    proto::Forming forming;
    Clock::time_point at;
  };
  std::map<std::string, FormingSeen> forming_;
  std::chrono::milliseconds peer_timeout_{10000};
  size_t links_per_uid_ = kLinksPerUid;
  size_t links_total_ = 0;
  std::string peering_unavailable_;
  std::string peer_endpoint_;
  std::vector<JobWaitsAnswer> job_waits_;  // answered, for take_job_waits()
  PoolFiles pools_;                        // local ranks' broadcast pools
  // By shared_pull_key: the link and request id of a shared pull in flight.
  std::map<std::string, std::pair<std::string, uint64_t>> shared_pulls_;
  // Broadcasts along the chain (chain_broadcasts.hpp), through these links.
  ChainBroadcasts chain_{jobs_, *this};
  Relays relays_{jobs_, *this, chain_};  // the relay tree (relays.hpp)
  // What ended, told upstream (notices.hpp).
  Notices notices_{
      jobs_, relays_, *this, node_id_, peer_timeout_, [this](Clock::time_point older_than) {
        std::vector<LinkPending> late;
        for (auto& [link, l] : links_)
          std::erase_if(l.pending, [&](auto& kv) {
            bool old =
                kv.second.kind == LinkPending::Kind::kRelayNotice && kv.second.sent < older_than;
            if (old) late.push_back(std::move(kv.second));
            return old;
          });
        return late;
      }};
};

}  // namespace muster::daemon
