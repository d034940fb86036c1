// Skipping a test, or the rest of it, that needs root (to run other users,
// to own their files), with a warning that says what it needed. Unlike
// as_user.hpp this uses Catch2 (WARN): call it from test cases only.
#pragma once

#include <catch2/catch.hpp>

#include <unistd.h>

#include <string>

#include "support/as_user.hpp"

namespace muster::test {

// True when the test runs as root; otherwise warns "SKIP: needs root to
// NEED; this test runs as uid N" ("SKIP (in part)" when the test has checked
// something already) and false.
inline bool root_for(const std::string& need = "run a second user (nobody)", bool in_part = false) {
  if (root()) return true;
  WARN((in_part ? "SKIP (in part)" : "SKIP")
       << ": needs root to " << need << "; this test runs as uid " << ::geteuid());
  return false;
}

}  // namespace muster::test
