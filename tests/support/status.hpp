// Lookups in a daemon's status for the tests that check it: a GPU by its
// index, a job by its id.
#pragma once

#include <string>

#include "muster/client.hpp"

namespace muster::test {

// The GPU of this index, or nullptr.
inline const DeviceInfo* device(const DaemonStatus& s, int64_t index) {
  for (const auto& d : s.devices)
    if (static_cast<int64_t>(d.index) == index) return &d;
  return nullptr;
}

// The job of this id, or nullptr.
inline const JobInfo* job(const DaemonStatus& s, const std::string& id) {
  for (const auto& j : s.jobs)
    if (j.id == id) return &j;
  return nullptr;
}

}  // namespace muster::test
