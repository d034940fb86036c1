#include "liveness/pidwatch.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

namespace muster::daemon {

PidWatch::~PidWatch() {
  for (auto& [pid, e] : watched_)
    if (e.fd >= 0) ::close(e.fd);
}

uint64_t PidWatch::start_time(int64_t pid) {
  auto fields = stat_fields(pid);
  if (!fields) return 0;
  // Field 3 (state) ... field 22 (starttime).
  std::istringstream rest(*fields);
  std::string field;
  for (int n = 3; n <= 22; ++n)
    if (!(rest >> field)) return 0;
  try {
    return std::stoull(field);
  } catch (const std::exception&) {
    return 0;
  }
}

std::optional<std::string> PidWatch::stat_fields(int64_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return std::nullopt;
  auto close_paren = line.rfind(')');
  if (close_paren == std::string::npos || close_paren + 2 >= line.size()) return std::nullopt;
  return line.substr(close_paren + 2);
}

bool PidWatch::alive(int64_t pid) {
  if (pid <= 0) return false;
  // kill(pid, 0) succeeds for zombies too; /proc tells them apart.
  auto fields = stat_fields(pid);
  if (!fields) return false;
  char state = (*fields)[0];
  return state != 'Z' && state != 'X';
}

namespace {
int64_t parent_of(int64_t pid) {
  auto fields = PidWatch::stat_fields(pid);
  if (!fields) return 0;
  // The state letter, then the parent pid.
  std::istringstream rest(*fields);
  char state;
  int64_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}
}  // namespace

bool PidWatch::is_ancestor(int64_t ancestor, int64_t pid) {
  for (int depth = 0; depth < 64 && pid > 1; ++depth) {
    pid = parent_of(pid);
    if (pid == ancestor) return true;
  }
  return false;
}

bool PidWatch::watch(int64_t pid) {
  auto it = watched_.find(pid);
  if (it != watched_.end()) {
    ++it->second.refs;
    return true;
  }
  if (!alive(pid)) return false;
  int fd = static_cast<int>(::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0));
  if (fd < 0 && errno == ESRCH) return false;
  watched_[pid] = Entry{fd, 1};  // fd < 0: no pidfd support, swept instead
  if (fd >= 0 && listener_) listener_(pid, fd, true);
  return true;
}

void PidWatch::unwatch(int64_t pid) {
  auto it = watched_.find(pid);
  if (it == watched_.end()) return;
  if (--it->second.refs > 0) return;
  close_fd(pid, it->second);
  watched_.erase(it);
}

void PidWatch::forget(int64_t pid) {
  auto it = watched_.find(pid);
  if (it == watched_.end()) return;
  close_fd(pid, it->second);
  watched_.erase(it);
}

void PidWatch::close_fd(int64_t pid, Entry& e) {
  if (e.fd < 0) return;
  if (listener_) listener_(pid, e.fd, false);
  ::close(e.fd);
  e.fd = -1;
}

void PidWatch::set_listener(Listener listener) {
  listener_ = std::move(listener);
  if (!listener_) return;
  for (const auto& [pid, e] : watched_)
    if (e.fd >= 0) listener_(pid, e.fd, true);
}

bool PidWatch::needs_sweep() const {
  for (const auto& [pid, e] : watched_)
    if (e.fd < 0) return true;
  return false;
}

std::vector<int64_t> PidWatch::sweep_dead() const {
  std::vector<int64_t> dead;
  for (const auto& [pid, e] : watched_)
    if (e.fd < 0 && !alive(pid)) dead.push_back(pid);
  return dead;
}

}  // namespace muster::daemon
