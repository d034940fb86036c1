// Job ids: the one charset the launcher and the daemon both hold a job's
// name to, and the ids `muster run` makes up when none is given. A job id
// appears in logs, status tables, metrics labels, file names (dcgm mapping
// files, cgroups) and shared-memory names: printable, bounded, not empty.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace muster {

// "" when id is a valid job id (a job's name, as users give it): 1 to
// limits::kMaxJobNameBytes bytes of letters, digits and - _ . : @ +; else
// the sentence that says why not.
std::string job_id_problem(std::string_view id);

// Each user's jobs are a namespace of their own: two users' "train42" are
// two jobs. A daemon keys a job by its name and its owner: the name alone
// for root's (and an in-process caller's, owner -1), else the name, '~' and
// the owner's uid ("train42~1000"). '~' is outside the names' charset, so
// no name can pose as another user's key. The key is what daemons say to
// each other (uids agree across nodes, as Slurm requires) and what names a
// job's cgroup, state records and dcgm mapping line; users see the name
// and the owner apart.
std::string job_key(int64_t owner_uid, std::string_view name);
// The name within a key ("train42" of "train42~1000").
std::string_view job_name(std::string_view key);
// The owner a key names: its uid, 0 for a key without one (root's or an
// in-process caller's job).
int64_t job_key_owner(std::string_view key);
// "" when key is a valid key (a valid name, optionally '~' and a uid).
std::string job_key_problem(std::string_view key);

// A fresh job id, "job-" and 24 hex digits: 96 bits from getrandom(2), so
// that nobody can guess the name of a job before it exists (and take it).
// Throws std::system_error when the kernel gives no randomness.
std::string random_job_id();

}  // namespace muster
