// Whole-file reads and durable replacements, for the state snapshot and the
// change log.
#pragma once

#include <string>

namespace muster::daemon::files {

// The file's bytes into out; false when it does not exist. Throws
// Error(kInternal) when it exists but cannot be read.
bool read_all(const std::string& path, std::string& out);

// Replaces `path` with `bytes` so that a crash leaves either the old file or
// the new one, and the new one is on disk when this returns true: written
// to `tmp`, fsynced, renamed over `path`, then the directory fsynced. On
// false, *why names the step and the error, and `tmp` is removed.
bool write_durably(const std::string& dir, const std::string& tmp, const std::string& path,
                   const std::string& bytes, std::string* why);

}  // namespace muster::daemon::files
