// The job a local request names, in its sender's namespace (common/job_id.hpp
// job_key): made by State::scope_job before any handler runs.
#pragma once

#include <cstdint>
#include <string>

namespace muster::daemon {

struct JobScope {
  std::string name;          // as the sender named it; "" when the request names no job
  std::string key;           // the job as this daemon keys it
  int64_t owner = -1;        // whose namespace: the sender's, or the owner root named
  bool other_owner = false;  // root named another user's job (an owner field, or a key)
  // What a reply calls the job: its name in the sender's own namespace, its
  // key when root reached another user's job (so that root's next requests
  // name that job again, and nothing else).
  const std::string& spoken() const { return other_owner ? key : name; }
  // An error's sentence, with the key put back to the name the sender used.
  std::string speak(std::string text) const;
};

}  // namespace muster::daemon
