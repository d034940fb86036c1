// What `muster` checks before it starts anything, so that a mistake is a
// usage error (exit 2) with one sentence that names the fix, not a failure
// deep inside a run.
#pragma once

#include <string>

namespace muster::cli {

// Empty, or a sentence naming a MUSTER_* variable muster reads that holds
// a value it cannot use (MUSTER_TIMEOUT_S=abc), and what it takes.
std::string bad_environment();

}  // namespace muster::cli
