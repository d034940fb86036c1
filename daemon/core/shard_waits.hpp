// Shard requests parked while their permutation is computed off the loop
// (core/permuter.hpp): one computation per (job, generation, dataset size,
// seed + epoch), however many ranks ask meanwhile, and one computation at a
// time, so that the memory of the one under way plus the cached ones stays
// within ShardCache's budget. A computation nobody waits for any more is
// not started; one under way whose job ended is finished and thrown away.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/reply.hpp"
#include "sampler/sampler.hpp"

namespace muster::daemon {

class ShardWaits {
 public:
  struct Key {
    std::string job;
    uint64_t generation = 0;
    uint64_t n = 0;
    uint64_t seed = 0;  // seed + epoch
    bool operator==(const Key&) const = default;
  };
  struct Parked {
    ReplyTo to;
    ShardSpec spec;
  };
  struct Next {
    uint64_t ticket = 0;
    Key key;
  };
  struct Finished {
    uint64_t n = 0;      // of the computation that ended (0: none was under way)
    bool known = false;  // false: its job ended meanwhile, nobody to answer
    Key key;
    std::vector<Parked> waiting;
  };

  // Parks a request on the computation of `key`, queued when there is none.
  void park(const Key& key, Parked p);
  // The computation to start now, if none is under way and one is queued
  // that someone waits for; it is under way from now on.
  std::optional<Next> next();
  // The computation `ticket` ended: what was waiting for it.
  Finished finish(uint64_t ticket);
  // The requests parked for a job that ended, or for any job (the daemon
  // stops), forgotten with their computations.
  std::vector<Parked> drop_job(const std::string& job);
  std::vector<Parked> drop_all();
  // Forgets, unanswered, the requests parked for one local client
  // (Store::forget_client); returns their request ids.
  std::vector<uint64_t> forget_client(const std::string& routing_id);

 private:
  struct Computation {
    Key key;
    std::vector<Parked> waiting;
  };
  std::map<uint64_t, Computation> computations_;  // queued or under way, by ticket
  std::deque<uint64_t> queue_;                    // not started, oldest first
  uint64_t running_ = 0;                          // the ticket under way; 0 = none
  uint64_t running_n_ = 0;
  uint64_t next_ticket_ = 1;
};

}  // namespace muster::daemon
