// The names of broadcast segments in /dev/shm, written by libmuster and
// read by whoever cleans up after a creator that died (a surviving rank,
// the daemon at the job's end):
//   muster.<job part>.<generation>.<seq>.r<rank>.p<pid>.<nonce>
// The creator's pid is in the name so that a segment is known to be
// garbage once that pid is gone: only a SIGKILLed creator leaves one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace muster::shm {

// The job id as it may appear in a file name: itself when short and plain,
// else a hash, so names stay well under NAME_MAX.
std::string job_part(const std::string& job);

// "muster.<job part>." : every segment of the job, whatever its generation.
std::string job_prefix(const std::string& job);
// "muster.<job part>.<generation>.<seq>.r<rank>." : one rank's segments of
// one collective (its first and second round).
std::string round_prefix(const std::string& job, uint64_t generation, uint64_t seq, uint32_t rank);
// The shm_open name (with its leading '/') of a new segment.
std::string segment_name(const std::string& job, uint64_t generation, uint64_t seq, uint32_t rank,
                         int64_t pid, uint64_t nonce);
// The creator's pid in a segment's file name, if it has one.
std::optional<int64_t> creator_of(const std::string& file_name);

// Removes the segments in /dev/shm whose name starts with prefix and whose
// creator is gone; returns how many went. Those of live creators stay.
// owner_uid >= 0: only files that uid owns (the daemon sweeps as root at a
// job's end: a name alone, which another user's job may share or collide
// with, never makes it remove a segment of someone else's).
size_t remove_orphans(const std::string& prefix, int64_t owner_uid);
// The same for any owner (libmuster's ranks: the files they can unlink are
// theirs or open to them anyway). A separate function, not a default
// argument: libmuster exports the one-argument symbol.
size_t remove_orphans(const std::string& prefix);

}  // namespace muster::shm
