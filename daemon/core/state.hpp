// The daemon's whole state and every request handler, free of sockets: the
// server feeds it decoded requests and pid exits, and sends what it returns.
// Every handler validates before it mutates, so a refused request changes
// nothing.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gpu/inventory.hpp"
#include "jobs/job.hpp"
#include "liveness/pidwatch.hpp"
#include "protocol/envelope.hpp"

namespace muster::daemon {

// Where a reply goes: opaque to the state, filled in by the server.
struct ReplyTo {
  std::string routing_id;
  bool delimiter = false;  // REQ-style peer: reply needs an empty frame
  uint64_t request_id = 0;
};

struct Outgoing {
  ReplyTo to;
  std::string frame;
};

class StateFile;  // persist/state_file.hpp

struct DeviceSlot {
  gpu::Device device;
  std::string job;  // holder, empty when free
  uint32_t local_rank = 0;
};

class State {
 public:
  State(std::vector<gpu::Device> allowed_devices, PidWatch& watch);

  // Handles one decoded request; replies now (or later, for waits) go to out.
  void handle(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out);
  // A watched pid ended.
  void on_pid_exit(int64_t pid, std::vector<Outgoing>& out);
  // Fails waits whose deadline passed.
  void expire(Clock::time_point now, std::vector<Outgoing>& out);
  std::optional<Clock::time_point> next_deadline() const;
  // Fails every pending wait (daemon shutting down).
  void cancel_all(std::vector<Outgoing>& out);

  proto::StatusReply status() const;
  size_t job_count() const { return jobs_.size(); }

 private:
  // Saves and restores jobs, stores and leases across daemon restarts.
  friend class StateFile;

  enum class WaitKind { kGet, kWait, kBarrier };
  struct Waiter {
    ReplyTo to;
    WaitKind kind;
    std::string job;
    std::vector<std::string> keys;
    std::string barrier;
    uint32_t rank = 0;
    Clock::time_point deadline;
    std::multimap<Clock::time_point, uint64_t>::iterator deadline_it{};
  };

  template <class M>
  void reply(const ReplyTo& to, const M& m, std::vector<Outgoing>& out) {
    out.push_back({to, proto::encode(to.request_id, m)});
  }
  void fail(const ReplyTo& to, ErrorCode code, const std::string& msg, std::vector<Outgoing>& out);

  proto::RankInfo join(const proto::Join& m);
  proto::Reserved reserve(const proto::Reserve& m);
  void attach(const proto::Attach& m);
  void leave(const proto::Leave& m, std::vector<Outgoing>& out);
  void store_request(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out);
  void barrier(const ReplyTo& to, const proto::Barrier& m, std::vector<Outgoing>& out);
  // Sampler shards (shards.cpp): permutations cached per job, dropped with it.
  void shard_request(const ReplyTo& to, const proto::Envelope& env, std::vector<Outgoing>& out);
  void drop_shards(const std::string& job);

  Job& job_or_throw(const std::string& id);
  std::vector<int64_t> pick_devices(const std::string& job, size_t n, bool wants_gpu,
                                    const std::vector<int64_t>& subset) const;
  void lease(const std::string& job, uint32_t local_rank, int64_t device);
  void release(Job& job, uint32_t local_rank);
  void slot_ended(Job& job, uint32_t local_rank, const char* why, std::vector<Outgoing>& out);
  void maybe_remove(const std::string& id, std::vector<Outgoing>& out);
  void key_changed(Job& job, std::vector<Outgoing>& out);
  uint64_t add_waiter(Waiter w);
  // Forgets a waiter and its deadline entry (so the timer index never holds
  // answered requests).
  void drop_waiter(std::map<uint64_t, Waiter>::iterator it);

  std::vector<DeviceSlot> devices_;
  std::map<std::string, Job> jobs_;
  std::map<uint64_t, Waiter> waiters_;
  std::multimap<Clock::time_point, uint64_t> deadlines_;
  uint64_t next_waiter_ = 1;
  struct Permutation {
    uint64_t generation = 0;
    uint64_t n = 0;
    uint64_t seed = 0;                 // seed + epoch
    std::unique_ptr<uint32_t[]> perm;  // n entries; shuffled shards need n <= 2^28
    uint64_t last_used = 0;
  };
  std::map<std::string, std::vector<Permutation>> shard_cache_;  // by job
  size_t shard_cache_bytes_ = 0;
  uint64_t shard_clock_ = 0;
  PidWatch& watch_;
  Clock::time_point started_ = Clock::now();
};

}  // namespace muster::daemon
