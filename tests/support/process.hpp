// Test support: temporary directories, child processes with a stdout pipe,
// and a private musterd in its own runtime directory.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace muster::test {

// Path of a built program, passed in by meson as an environment variable.
std::string program(const char* env_var);

// Environment for a musterd whose memory a test measures: under
// AddressSanitizer, freed blocks are not held in its quarantine (256 MiB by
// default), which would count as the daemon's own growth. No effect in
// other builds.
std::map<std::string, std::string> measured_memory_env();

// A whole file's bytes ("" when it cannot be read), and a file replaced by
// bytes.
std::string slurp(const std::string& path);
void spit(const std::string& path, const std::string& bytes);
// The file's bytes, or "<missing>" when it cannot be opened (for checks
// that a file is gone).
std::string slurp_or_missing(const std::string& path);

// One line from fd within timeout, read through buf (what follows the line
// stays there for the next call): nullopt at EOF, or when no line came in
// time. peek: with no time left, fd is still looked at once (a line
// already there is taken, without waiting).
std::optional<std::string> read_line_from(int fd, std::string& buf,
                                          std::chrono::milliseconds timeout, bool peek = false);

class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class Process {
 public:
  // env entries override (or, with an empty value, remove) the inherited ones.
  // merge_stderr: the pipe carries stderr too (for checking error sentences).
  Process(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env = {},
          bool merge_stderr = false);
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  // One line of the child's stdout, or nullopt at EOF or after the timeout.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);
  // Everything until EOF (bounded by timeout).
  std::string read_all(std::chrono::milliseconds timeout);
  // Exit code (128+signal); nullopt if still running after timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  void signal(int sig);

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
  std::optional<int> status_;
};

class TestDaemon {
 public:
  // env: more environment for musterd (e.g. LD_PRELOAD); wrapper: a
  // command that runs musterd (e.g. prlimit --nofile=1024:1024 --).
  explicit TestDaemon(std::vector<std::string> extra_args = {},
                      std::map<std::string, std::string> env = {},
                      std::vector<std::string> wrapper = {});
  ~TestDaemon();
  const std::string& endpoint() const { return endpoint_; }
  const std::string& runtime_dir() const { return dir_.path(); }
  pid_t pid() const { return proc_->pid(); }
  // The peer listener's endpoint ("tcp://127.0.0.1:PORT") from the file the
  // daemon writes once it listens (--peer-port 0 picks any); throws when it
  // does not appear within 10 s.
  std::string peer_endpoint() const;

  // kill -9, as a crash would, and waits for the exit; the runtime dir and
  // what the daemon saved there stay.
  void kill9();
  // SIGTERM, as systemd stops it: its exit code (128+signal), or nullopt
  // when it is still running after timeout.
  std::optional<int> stop(std::chrono::milliseconds timeout);
  // Starts musterd again on the same runtime dir with the same arguments
  // (as systemd's Restart= does) and waits until it answers.
  void start();
  // The same, with more arguments from now on (a restart with other settings).
  void start(const std::vector<std::string>& more_args);

 private:
  TempDir dir_;
  std::string endpoint_;
  std::vector<std::string> argv_;
  std::map<std::string, std::string> env_;
  std::unique_ptr<Process> proc_;
};

// A separate process (support/rank_main.cpp) that joins d's job `job` as
// local_rank of local_world_size ranks, so that it has a pid of its own;
// gpu: "gpu" or "cpu"; extra: more of rank_main's arguments (barrier NAME).
// It keeps its slot until it ends (with proc). line: the rank info it
// printed ("" when none came within 10 s); device: its lease from that
// line (-2 when none).
struct Rank {
  std::unique_ptr<Process> proc;
  std::string line;
  int device = -2;
  Rank(const TestDaemon& d, const std::string& job, int local_world_size, int local_rank = -1,
       const char* gpu = "gpu", const std::vector<std::string>& extra = {});
};

// Polls cond every 10 ms until it holds or timeout passes.
template <class F>
bool eventually(F cond, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (cond()) return true;
    struct timespec ts {
      0, 10 * 1000 * 1000
    };
    nanosleep(&ts, nullptr);
  }
  return cond();
}

bool process_exists(pid_t pid);
// The parent pid of pid (from /proc/PID/stat), 0 when gone.
pid_t parent_of(pid_t pid);

}  // namespace muster::test
