// Broadcasts across nodes along the chain (cluster/broadcast/bcast_chain.hpp says
// how they flow): this node's part of each job's latest broadcast, the
// ChainCast, and the requests that move it: the local rank's push, pull
// and leave, the next node's pulls and leave, the chunks that come from
// the node before. What it sends to other daemons goes through the node's
// links (Links, which NodeLinks is); a failure goes both ways along the
// chain.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "cluster/broadcast/bcast_chain.hpp"
#include "cluster/cluster.hpp"
#include "cluster/route.hpp"
#include "core/job_table.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"

namespace muster::daemon {

class ChainBroadcasts {
 public:
  // What a chain broadcast asks of the node's links to other daemons.
  class Links {
   public:
    virtual ~Links() = default;
    // Sends f to the daemon at `link`; its answer goes as p says.
    virtual void send_up(const std::string& link, LinkPending p, const proto::Forward& f,
                         std::vector<Outgoing>& out) = 0;
    // A shared pull (BcastPull::shared) named `key` (shared_pull_key) is
    // in flight; its answer, whoever asked, comes under request id 0.
    virtual bool pulling(const std::string& key) const = 0;
    // Sends the shared pull f to `link`, as `key`.
    virtual void pull_shared(const std::string& link, const std::string& key, LinkPending p,
                             const proto::Forward& f, std::vector<Outgoing>& out) = 0;
    // A rank's request sent on the way route() chose (route.hpp): one
    // that waited for room goes on along the chain (Route::kChain).
    virtual void send_on(Route where, const ReplyTo& to, Job& job, const proto::Envelope& env,
                         std::vector<Outgoing>& out) = 0;
    // Fails the job's broadcast requests in flight to `link`.
    virtual void fail_in_flight(const std::string& link, const std::string& job, ErrorCode code,
                                const std::string& why, std::vector<Outgoing>& out) = 0;
    // A local rank's broadcast pool (pool_files.hpp).
    virtual std::shared_ptr<PoolFile> open_pool(const ReplyTo& to, const proto::PoolRef& ref,
                                                uint64_t end, bool write) = 0;
  };

  ChainBroadcasts(JobTable& jobs, Links& links) : jobs_(jobs), links_(links) {}
  ChainBroadcasts(const ChainBroadcasts&) = delete;
  ChainBroadcasts& operator=(const ChainBroadcasts&) = delete;

  // A local rank's push or leave, or a pull that waits for room: handled
  // (true); false for a pull that goes upstream now (forward_bcast).
  bool local(const ReplyTo& to, Job& job, const proto::Envelope& env, std::vector<Outgoing>& out);
  // The next node's bcast_pull or bcast_leave (a Forward, relay set).
  void from_down(const ReplyTo& to, Job& job, const proto::Envelope& env,
                 std::vector<Outgoing>& out);
  // A shared chunk that came from the node before: held for the next one.
  void got(const proto::Envelope& env, void* data, size_t size, std::shared_ptr<void>& held,
           std::vector<Outgoing>& out);
  // The answer to a pull p of this daemon's own (self_pull) that is an
  // error: that broadcast fails, both ways.
  void self_refused(const LinkPending& p, const proto::Envelope& env, std::vector<Outgoing>& out);
  // The job's broadcast fails here; tell_up: the nodes before are told.
  void fail(const std::string& job, ErrorCode code, const std::string& why, bool tell_up,
            std::vector<Outgoing>& out);
  // A rank of this node ended (`ended` says how): the job's broadcasts of
  // this generation fail, now and when one starts later.
  void rank_ended(const Job& job, const std::string& ended, std::vector<Outgoing>& out);
  // The job ended here: nothing of it is kept.
  void forget(const std::string& job) {
    chains_.erase(job);
    exits_.erase(job);
  }
  // Timeouts of parked pulls and of requests waiting for room.
  void tick(Clock::time_point now, std::vector<Outgoing>& out);

 private:
  bool pull(const ReplyTo& to, Job& job, const proto::Envelope& env, std::vector<Outgoing>& out);
  void push(const ReplyTo& to, Job& job, const proto::Envelope& env, std::vector<Outgoing>& out);
  void leave(const ReplyTo& to, Job& job, const proto::Envelope& env, std::vector<Outgoing>& out);
  // The job's broadcast `seq`, made on first word of it (an older one is
  // abandoned); throws when it failed or ended, or the request disagrees.
  // local: from this node's rank, whose word overrules what only the next
  // node said; the next node cannot end a broadcast under way here.
  ChainCast& cast(const Job& job, uint64_t generation, uint64_t seq, uint32_t root, uint64_t size,
                  uint64_t chunk, bool local, std::vector<Outgoing>& out);
  void fail_cast(ChainCast& cc, ErrorCode code, const std::string& why, bool tell_up,
                 std::vector<Outgoing>& out);
  // A bcast_leave of this node's to the node before (why: it failed).
  void tell_node_before(const ChainCast& cc, const std::string& why, std::vector<Outgoing>& out);
  // A pull of this daemon's own, for the next node (its relay gave up).
  void self_pull(ChainCast& cc, uint64_t index, std::vector<Outgoing>& out);
  void serve(ChainCast& cc, const ReplyTo& to, const ChainCast::Frame& f,
             std::vector<Outgoing>& out);
  void hold(ChainCast& cc, uint64_t index, ChainCast::Frame f, std::vector<Outgoing>& out);
  // Drops what the next node holds, lets waiting requests on, ends it.
  void advance(ChainCast& cc, std::vector<Outgoing>& out);

  static void refuse(const ReplyTo& to, ErrorCode code, const std::string& msg,
                     std::vector<Outgoing>& out);

  JobTable& jobs_;
  Links& links_;
  std::map<std::string, ChainCast> chains_;  // by job id: its latest broadcast
  // By job id: the generation in which a rank of this node ended, and how
  // (the job's broadcasts of that generation fail here).
  std::map<std::string, std::pair<uint64_t, std::string>> exits_;
};

}  // namespace muster::daemon
