// Which rank is stuck where: the open barriers and key waits of a job as
// status shows them, and the once-per-wait report of those parked longer
// than --stuck-after. Read-only views of the Store and the jobs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/store.hpp"
#include "jobs/job.hpp"
#include "protocol/messages.hpp"
#include "wait_text.hpp"

namespace muster::daemon {

// The daemon's waits in numbers (for metrics): parked now, stuck now
// (parked longer than --stuck-after), and stuck waits reported (logged)
// since the daemon started, which only grows.
struct WaitCounts {
  uint64_t parked = 0;
  uint64_t stuck = 0;
  uint64_t stuck_detected = 0;
};

// A wait's ranks in rank order (those it cannot name, -1, first).
void sort_ranks(proto::WaitStatus& w);

// The job's open barriers and key waits parked in `store`, oldest first.
std::vector<proto::WaitStatus> open_waits(const Job& job, const Store& store,
                                          Clock::time_point now);

// A rank of this node's part of the job (local rank i), with its node rank
// and pid; and the rank a local client's request came from, found by its
// process (rank -1 when it is none of the job's, or came from a peer).
proto::WaitRank local_rank(const Job& job, uint32_t i);
proto::WaitRank rank_of(const Job& job, const ReplyTo& to);

}  // namespace muster::daemon
