// The broadcasts a coordinator relays (the star route: the root's node
// pushes each chunk, every other node pulls it; bcast_relay.hpp holds the
// state of one): their windows, the chunks held, the parked pushes and
// pulls, their deadlines, and failing them when the round moves on. The
// chain route carries no bytes through the coordinator (bcast_chain.hpp).
// The Coordinator finds the round a request is for and hands it here.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cluster/broadcast/bcast_relay.hpp"
#include "cluster/cluster.hpp"
#include "core/reply.hpp"
#include "core/store.hpp"
#include "protocol/cluster_messages.hpp"

namespace muster::daemon {

class RelayedBroadcasts {
 public:
  // rounds: the coordinator's, by job id (tick() fails the broadcasts of a
  // round that ended or moved on); store: wakes waits on the statistics
  // keys; save_wanted: set when a new broadcast's number must be saved
  // before any chunk of it is acknowledged.
  RelayedBroadcasts(const std::map<std::string, CoordJob>& rounds, Store& store, bool& save_wanted)
      : rounds_(rounds), store_(store), save_wanted_(save_wanted) {}

  // A push, pull or leave of the round cj (of its current generation).
  // from: the root's pool, which holds the chunk's bytes (its rank named
  // it, and this daemon is the root's: State::bcast_here).
  void push(const ReplyTo& to, const proto::BcastPushView& m, CoordJob& cj,
            std::vector<Outgoing>& out, const PoolFile* from = nullptr);
  void pull(const ReplyTo& to, const proto::BcastPull& m, CoordJob& cj, std::vector<Outgoing>& out);
  void leave(const ReplyTo& to, const proto::BcastLeave& m, CoordJob& cj,
             std::vector<Outgoing>& out);
  // Deadlines, rounds that ended or moved on, and giving the chunks'
  // memory back to the system a while after the last broadcast.
  void tick(Clock::time_point now, std::vector<Outgoing>& out);

 private:
  // The round and the broadcast a push, pull or leave is for.
  struct BcastOf {
    CoordJob& cj;
    BcastRelay& r;
    const std::string& job;
    uint64_t seq;
    uint32_t root;
    std::string name() const;  // for messages
  };
  template <class M>
  BcastOf of(const M& m, CoordJob& cj, std::vector<Outgoing>& out) {
    return {cj, relay(cj, m.job, m.seq, m.root, m.size, m.chunk, out), m.job, m.seq, m.root};
  }
  void restarted_check(CoordJob& cj, const std::string& job, uint64_t seq, uint32_t root);
  BcastRelay& relay(CoordJob& cj, const std::string& job, uint64_t seq, uint32_t root,
                    uint64_t size, uint64_t chunk, std::vector<Outgoing>& out);
  void fail_cast(BcastRelay& r, ErrorCode code, const std::string& why, std::vector<Outgoing>& out);
  void advance(CoordJob& cj, BcastRelay& r, std::vector<Outgoing>& out);
  // Answers node's pull of chunk `index` (held) under to's request id.
  void serve(BcastRelay& r, const BcastRelay::Parked& pull, BcastRelay::Chunk& c,
             std::vector<Outgoing>& out);

  const std::map<std::string, CoordJob>& rounds_;
  Store& store_;
  bool& save_wanted_;
  std::map<std::string, BcastRelays> by_job_;  // of each job's current generation
  // When the heap gives back the chunks' memory: a while after the last
  // broadcast ended (main.cpp keeps freed chunks on the heap, for the next
  // ones of a training loop).
  std::optional<Clock::time_point> trim_at_;
};

}  // namespace muster::daemon
