// Job ids: the one charset the launcher and the daemon both hold a job's
// name to, and the ids `muster run` makes up when none is given. A job id
// appears in logs, status tables, metrics labels, file names (dcgm mapping
// files, cgroups) and shared-memory names: printable, bounded, not empty.
#pragma once

#include <string>
#include <string_view>

namespace muster {

// "" when id is a valid job id: 1 to limits::kMaxJobIdBytes bytes of
// letters, digits and - _ . : @ +; else the sentence that says why not.
std::string job_id_problem(std::string_view id);

// A fresh job id, "job-" and 24 hex digits: 96 bits from getrandom(2), so
// that nobody can guess the name of a job before it exists (and take it).
// Throws std::system_error when the kernel gives no randomness.
std::string random_job_id();

}  // namespace muster
