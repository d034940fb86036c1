// Whole-file reads and durable replacements, for the state snapshot and the
// change log, in the state directory.
#pragma once

#include <fcntl.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "env/env.hpp"

namespace muster::daemon::files {

// The directory the files are in: by its descriptor once the daemon opened
// and checked it (dirs/runtime_dir.hpp open_own_dir: not through a link,
// its own, writable by no one else), so that nothing done to the path
// later redirects a write; by its path where none was opened (tests that
// drive the state file directly). Every file in it is read and written
// through env (env/env.hpp): the real disk unless a test hands another.
struct Dir {
  std::string path;
  int fd = AT_FDCWD;
  Env* env = &Env::posix();
  // What openat(fd, ...) is given for the file `name`.
  std::string at(const std::string& name) const {
    return fd == AT_FDCWD ? path + "/" + name : name;
  }
  // The file's path, for sentences.
  std::string shown(const std::string& name) const { return path + "/" + name; }
};

// The file's bytes into out; false when it does not exist. Throws
// Error(kInternal) when it exists but cannot be read (or is a link).
bool read_all(const Dir& dir, const std::string& name, std::string& out);

// Replaces the file `name` with `bytes` so that a crash leaves either the
// old file or the new one, and the new one is on disk when this returns
// true: written to a new NAME.tmp (created exclusively, never through a
// link), fsynced, renamed over `name`, then the directory fsynced. On
// false, *why names the step and the error, and the temporary file is gone.
bool write_durably(const Dir& dir, const std::string& name, const std::string& bytes,
                   std::string* why);
// The same with bytes that `produce` hands to the function it is given, in
// pieces, as it makes them: nothing holds the whole file in memory. After
// a failed write the rest of the pieces are dropped (and *why says why).
// *written: the file's length, when it returns true.
using Produce = std::function<void(const std::function<void(std::string_view)>& emit)>;
bool write_durably(const Dir& dir, const std::string& name, const Produce& produce,
                   std::string* why, uint64_t* written = nullptr);

}  // namespace muster::daemon::files
