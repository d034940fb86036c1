// A node's notices to the coordinator that something ended (rank_exited,
// node_leave), batched and sent through the relay tree (notices.cpp says
// how): the ranks of this node and of its children that ended, and the
// leaves of children that came after this node's own part of the job
// ended (LateLeaves), passed on for a while.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "cluster/cluster.hpp"
#include "cluster/relays.hpp"
#include "core/job_table.hpp"
#include "protocol/cluster_messages.hpp"

namespace muster::daemon {

class Notices {
 public:
  // The relayed notices on the node's links older than `older_than`,
  // taken off them: their parent let them wait, the coordinator is told.
  using TakeLate = std::function<std::vector<LinkPending>(Clock::time_point older_than)>;
  // node_id and peer_timeout: the node's, as configured (NodeLinks).
  Notices(JobTable& jobs, Relays& relays, Relays::Links& links, const std::string& node_id,
          const std::chrono::milliseconds& peer_timeout, TakeLate take_late)
      : jobs_(jobs),
        relays_(relays),
        links_(links),
        node_id_(node_id),
        peer_timeout_(peer_timeout),
        take_late_(std::move(take_late)) {}

  // A child daemon's NodeLeave or RankExited (relay set), taken into this
  // node's next batch; refused (thrown) when this node cannot speak for
  // the job: the child tells the coordinator itself.
  void leave(const proto::NodeLeave& m);
  void exited(const proto::RankExited& m, std::vector<Outgoing>& out);
  // A rank of this node ended: it goes upstream with those that end with it.
  void queue_exited(Job& job, uint32_t rank, const char* why, std::vector<Outgoing>& out);
  // The ended ranks of a job gathered in r go upstream now.
  void send_exited(const Job& job, RelayState& r, std::vector<Outgoing>& out);
  // A notice its parent refused: the coordinator is told itself.
  void direct(const LinkPending& p, std::vector<Outgoing>& out);
  // Batches due, notices a parent let wait, late leaves passed on.
  void tick(Clock::time_point now, std::vector<Outgoing>& out);
  // This node's part of the job ended: the children's leaves that come
  // after it are gathered here (fresh) until they go.
  LateLeaves& late_for(const std::string& job) { return late_[job] = {}; }
  bool active() const { return !late_.empty(); }

 private:
  // The relay state of a formed job at `generation`, reset when it was of
  // an older one; null when this node has no such world.
  RelayState* relay_of(const std::string& job_id, uint64_t generation);

  JobTable& jobs_;
  Relays& relays_;
  Relays::Links& links_;
  const std::string& node_id_;
  const std::chrono::milliseconds& peer_timeout_;
  TakeLate take_late_;
  std::map<std::string, LateLeaves> late_;  // by job id, of jobs ended here
};

}  // namespace muster::daemon
