// The relay tree of a multi-node job, as one node serves it: its ranks' and
// its children's barriers and key waits, sent upstream once per subtree
// and answered back down (relays.cpp); what is kept of set-once keys; the
// waits as status shows them and the stuck report (relay_waits.cpp). The
// per-job RelayState is also where the node's heartbeats (beats.cpp) and
// notices (notices.cpp) keep what they heard from below.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cluster/broadcast/chain_broadcasts.hpp"
#include "cluster/cluster.hpp"
#include "core/job_table.hpp"
#include "core/waits.hpp"
#include "protocol/envelope.hpp"

namespace muster::daemon {

class Relays {
 public:
  // How a relay reaches upstream: the node's links (NodeLinks). send
  // sends the frame make(request id) to the coordinator or parent at
  // `link` and remembers p; forget drops the relayed barriers and key
  // waits of the job in flight on every link.
  class Links {
   public:
    virtual void send_relayed(const std::string& link, LinkPending p,
                              const std::function<std::string(uint64_t)>& make,
                              std::vector<Outgoing>& out) = 0;
    virtual void forget_relayed(const std::string& job) = 0;

   protected:
    ~Links() = default;
  };
  Relays(JobTable& jobs, Links& links, ChainBroadcasts& chain)
      : jobs_(jobs), links_(links), chain_(chain) {}

  // A local rank's barrier (local_rank >= 0) or a child's BarrierUp for
  // `count` ranks, and a local rank's or a child's key wait: sent upstream
  // once the subtree is in, or joined to the one in flight.
  void barrier(const ReplyTo& to, Job& job, const std::string& name, uint32_t count,
               int64_t local_rank, int64_t timeout_ms, std::vector<Outgoing>& out);
  void get(const ReplyTo& to, Job& job, const proto::Envelope& env, std::vector<Outgoing>& out);
  // A child daemon's BarrierUp or Forward (relay set) for our part of a job.
  void from_child(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out);
  // The upstream answer to a relayed barrier or key wait: everyone below
  // gets it, under their own request ids.
  void answer(const LinkPending& p, const proto::Envelope& env, std::vector<Outgoing>& out);
  // Handles the children's requests that came before our World (or one of
  // a generation we had not reached yet), now that it came.
  void early(const std::string& job, std::vector<Outgoing>& out);
  // Fails every wait of the job held here (and its chain's), keeping what
  // was heard from below for the heartbeats.
  void fail(const std::string& job, ErrorCode code, const std::string& why,
            std::vector<Outgoing>& out);
  // The value of the set-once key that this node's relay keeps for the
  // job, or null.
  const std::string* kept(const Job& job, const std::string& key) const;

  // The barriers and key waits this node's own ranks of the job wait in
  // (relay_waits.cpp): counts and missing ranks are this node's, not its
  // subtree's. stuck: older than stuck_after.
  std::vector<proto::WaitStatus> waits(const Job& job, Clock::time_point now) const;
  // Logs, once each, the relayed waits older than stuck_after; returns how
  // many it logged.
  uint64_t report_stuck(Clock::time_point now);
  // The local requests parked in this node's relays, and how many of them
  // are stuck (stuck_detected unused).
  WaitCounts wait_counts(Clock::time_point now) const;
  void set_stuck_after(Clock::duration after) { stuck_after_ = after; }

  // The relay state of each job, for the heartbeats and notices.
  RelayState& of(const std::string& job) { return relays_[job]; }
  std::map<std::string, RelayState>& all() { return relays_; }
  const std::map<std::string, RelayState>& all() const { return relays_; }

 private:
  // Keeps the value of a set-once key that came from upstream.
  void keep(RelayState& r, const LinkPending& p, const proto::Envelope& env);

  // Children's requests held for one job, at most (each child of the tree
  // sends a few: its barrier and key waits).
  static constexpr size_t kMaxEarly = 4096;
  static constexpr size_t kMaxEarlyBytes = size_t{16} << 20;

  JobTable& jobs_;
  Links& links_;
  ChainBroadcasts& chain_;
  std::map<std::string, RelayState> relays_;  // by job id
  Clock::duration stuck_after_ = std::chrono::seconds(60);
};

}  // namespace muster::daemon
