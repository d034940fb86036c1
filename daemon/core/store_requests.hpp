// The store and barrier requests of a job (torch's Store API and muster's
// barrier): each decoded, checked against the quotas and ceilings, applied
// to the job's KeyValues, and answered, or parked in the Store when it must
// wait. One method a message type: the dispatcher's table (dispatch.cpp)
// names them. A request that a peer forwarded works on the coordinator's
// global store of its job; which job that is, is the caller's (FindJob).
#pragma once

#include <functional>
#include <string>

#include "core/holdings_count.hpp"
#include "core/quotas.hpp"
#include "core/request.hpp"
#include "core/store.hpp"
#include "jobs/job.hpp"

namespace muster::daemon {

class HoldingsCount;

class StoreRequests {
 public:
  // The job a request names, or a throw (unknown_job, or a forwarded
  // request naming another job than it was checked for).
  using FindJob = std::function<Job&(const ReplyTo&, const std::string&)>;
  // quotas and holdings: State's, read at each request (set_quotas may
  // change them); holdings answers what every uid holds (holdings_count.hpp).
  StoreRequests(Store& store, const Quotas& quotas, const HoldingsCount& holdings, FindJob find);
  StoreRequests(const StoreRequests&) = delete;
  StoreRequests& operator=(const StoreRequests&) = delete;

  void set(const Request& r);
  void get(const Request& r);
  void add(const Request& r);
  void compare_set(const Request& r);
  void erase(const Request& r);
  void wait(const Request& r);
  void num_keys(const Request& r);
  void list_keys(const Request& r);
  void append(const Request& r);
  void multi_set(const Request& r);
  void multi_get(const Request& r);
  void queue_push(const Request& r);
  void queue_pop(const Request& r);
  void queue_len(const Request& r);
  void barrier(const Request& r);

 private:
  // Sets key to value within the job's quotas, replies ok and answers the
  // waits it completes: the end of every request that writes one key.
  void set_key(const Request& r, Job& job, const std::string& key, std::string value);
  // A read that found nothing: refused with `none` when it may not wait
  // (timeout 0), else parked within the quotas until its keys come or its
  // deadline passes.
  void park(const Request& r, Job& job, Store::KeyWait kind, std::vector<std::string> keys,
            int64_t timeout_ms, Error none);
  // Answers the job's key waits that can complete now.
  void key_changed(Job& job, std::vector<Outgoing>& out);

  Store& store_;
  const Quotas& quotas_;
  const HoldingsCount& holdings_;
  FindJob find_;
};

}  // namespace muster::daemon
