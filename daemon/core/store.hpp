// The waits of the jobs' key/value stores and barriers: requests parked
// until a key is set, a barrier fills or their deadline passes, and
// answered then, with no polling. Plain keys, values and deadlines: the
// request handlers decode the protocol and encode what the Store answers
// through Answers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/reply.hpp"
#include "jobs/job.hpp"
#include "muster/error.hpp"

namespace muster::daemon {

// How the Store answers a parked request.
class Answers {
 public:
  virtual void ok(const ReplyTo& to) = 0;
  virtual void value(const ReplyTo& to, const std::string& v) = 0;
  virtual void values(const ReplyTo& to, const std::vector<std::string>& v) = 0;
  virtual void error(const ReplyTo& to, ErrorCode code, const std::string& why) = 0;

 protected:
  ~Answers() = default;
};

class Store {
 public:
  enum class KeyWait {
    kGet,       // one key, answered with its value
    kWait,      // every key, answered ok
    kMultiGet,  // every key, answered with their values
    kPop,       // one queue, answered with the item it takes (core/queues.hpp)
  };
  // Parks a wait for keys of the job until deadline.
  void wait_keys(Job& job, const ReplyTo& to, KeyWait kind, std::vector<std::string> keys,
                 Clock::time_point deadline);
  // An arrival at the job's barrier `name` that stands for `count` ranks (a
  // whole subtree) or for `rank`: parked until deadline while fewer than
  // `world` ranks are in; the one that fills the barrier answers every
  // arrival (ok), itself last, and the barrier is forgotten.
  void arrive(Job& job, const ReplyTo& to, const std::string& name, uint32_t rank, uint32_t count,
              uint64_t world, Clock::time_point deadline, Answers& a);
  // Answers the job's key waits whose keys are all set now.
  void key_changed(Job& job, Answers& a);
  // Fails every parked arrival at the job's barriers, with "barrier '<name>'
  // of job '<id>' cannot complete: rank <rank_what>", and forgets them.
  void fail_barriers(Job& job, const std::string& rank_what, Answers& a);
  // Fails every wait of the job, keys and barriers, and forgets them.
  void fail_all(Job& job, ErrorCode code, const std::string& why, Answers& a);

  // The store a parked wait is in, if it still exists.
  using FindJob = std::function<Job*(const ReplyTo& to, const std::string& job)>;
  // Fails the waits whose deadline passed, saying what they missed.
  void expire(Clock::time_point now, const FindJob& find, Answers& a);
  std::optional<Clock::time_point> next_deadline() const;
  // Fails every wait (the daemon is stopping).
  void cancel_all(Answers& a);

  // A wait parked longer than `after` is stuck (--stuck-after): take_stuck
  // hands out each once, when its time comes; next_deadline() covers it.
  void set_stuck_after(Clock::duration after) { stuck_after_ = after; }
  Clock::duration stuck_after() const { return stuck_after_; }
  // The waits that became stuck by `now`, each once; they stay parked.
  std::vector<uint64_t> take_stuck(Clock::time_point now);
  // How many waits are parked, and how many of them are stuck.
  size_t parked() const { return waiters_.size(); }
  // The bytes of parked requests charged to each uid (the owner their job's
  // key names), for the memory ceiling (core/ceilings.hpp); and what one
  // naming `key_bytes` bytes of keys costs.
  const std::unordered_map<int64_t, uint64_t>& parked_bytes() const { return parked_bytes_; }
  static uint64_t parked_cost(uint64_t key_bytes) { return sizeof(Waiter) + key_bytes; }
  size_t stuck() const { return stuck_; }
  // Forgets, unanswered, the gets and waits parked for one local client
  // (its replies go unread: the memory of its keys is freed); returns their
  // request ids. Its barrier arrivals stay: they count toward the barrier.
  std::vector<uint64_t> forget_client(const std::string& routing_id, const FindJob& find);

  enum class Kind { kGet, kWait, kMultiGet, kPop, kBarrier };
  // A parked request, as status and the stuck report read it.
  struct Waiter {
    ReplyTo to;
    Kind kind;
    std::string job;
    std::vector<std::string> keys;
    std::string barrier;
    uint32_t rank = 0;
    Clock::time_point deadline;
    uint32_t count = 1;  // barrier: ranks this arrival stands for
    std::multimap<Clock::time_point, uint64_t>::iterator deadline_it{};
    Clock::time_point since{};
    std::multimap<Clock::time_point, uint64_t>::iterator stuck_it{};
    bool stuck = false;         // parked longer than stuck_after
    bool stuck_logged = false;  // a key wait whose stuck line was written
  };
  // The parked wait of an id in a job's lists, or nullptr once answered.
  const Waiter* find(uint64_t id) const;
  Waiter* find(uint64_t id);

 private:
  uint64_t add(Waiter w);
  // Forgets a waiter and its deadline entry (so the timer index never holds
  // answered requests).
  void drop(std::map<uint64_t, Waiter>::iterator it);
  // Answers (or fails, when why is set) the waiters of `ids` still parked.
  void fail_ids(const std::vector<uint64_t>& ids, ErrorCode code, const std::string& why,
                Answers& a);
  std::string timeout_message(const Waiter& w, Job* job) const;
  // Answers a key wait whose keys are all set.
  static void answer(Job& job, const Waiter& w, Answers& a);

  std::map<uint64_t, Waiter> waiters_;
  std::unordered_map<int64_t, uint64_t> parked_bytes_;
  std::multimap<Clock::time_point, uint64_t> deadlines_;
  // When each wait not yet stuck becomes stuck.
  std::multimap<Clock::time_point, uint64_t> stuck_due_;
  Clock::duration stuck_after_ = std::chrono::seconds(60);
  size_t stuck_ = 0;
  uint64_t next_ = 1;
};

}  // namespace muster::daemon
