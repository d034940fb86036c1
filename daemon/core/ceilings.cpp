#include "core/ceilings.hpp"

#include <sys/statvfs.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "muster/error.hpp"

namespace muster::daemon {

namespace {

std::string mib(uint64_t bytes) {
  return std::to_string(bytes >> 20) + " MiB";
}

[[noreturn]] void over(const std::string& what, const char* option) {
  throw Error(ErrorCode::kQuotaExceeded, what + "; nothing was changed (musterd --" + option +
                                             " sets the ceiling, none = no ceiling)");
}

void check_one(const char* name, const char* option, uint64_t ceiling, uint64_t total,
               uint64_t mine, uint64_t active, int64_t uid, uint64_t growth) {
  if (ceiling == 0 || growth == 0) return;
  if (total + growth > ceiling)
    over("the daemon holds " + mib(total) + " of " + name + " for all its users; " +
             std::to_string(growth) + " bytes more would pass its " + name + " ceiling of " +
             mib(ceiling),
         option);
  if (uid == 0) return;  // root's: the ceiling alone
  const uint64_t share = ceiling / std::max<uint64_t>(2, active);
  if (mine + growth > share)
    over("uid " + std::to_string(uid) + " holds " + mib(mine) + " of the daemon's " + name + "; " +
             std::to_string(growth) + " bytes more would pass its share, " + mib(share) +
             " of the " + name + " ceiling of " + mib(ceiling) +
             (active > 1 ? ", shared by " + std::to_string(active) + " active users"
                         : ": half, while it is the one user active"),
         option);
}

// The first line of a file, "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

bool all_digits(const std::string& s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

// The lowest memory.max of the daemon's cgroup and its parents (cgroup v2),
// 0 when none is set.
uint64_t cgroup_limit(const std::string& root, std::string* where) {
  std::ifstream in(root + "/proc/self/cgroup");
  std::string line, path;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty() || path.front() != '/') return 0;
  uint64_t lowest = 0;
  for (;;) {
    std::string v = first_line(root + "/sys/fs/cgroup" + (path == "/" ? "" : path) + "/memory.max");
    if (all_digits(v)) {
      uint64_t n = std::stoull(v);
      if (lowest == 0 || n < lowest) lowest = n, *where = path;
    }
    if (path == "/") break;
    path = path.substr(0, path.rfind('/'));
    if (path.empty()) path = "/";
  }
  return lowest;
}

uint64_t mem_available(const std::string& root) {
  std::ifstream in(root + "/proc/meminfo");
  std::string key;
  uint64_t kib = 0;
  std::string unit;
  while (in >> key >> kib) {
    std::getline(in, unit);
    if (key == "MemAvailable:") return kib << 10;
  }
  return 0;
}

}  // namespace

void check_ceilings(uint64_t memory, uint64_t state, const Holdings& h, int64_t uid,
                    uint64_t memory_growth, uint64_t state_growth) {
  check_one("memory", "max-memory", memory, h.memory_total, h.memory_mine, h.active, uid,
            memory_growth);
  check_one("saved state", "max-state-bytes", state, h.state_total, h.state_mine, h.active, uid,
            state_growth);
}

uint64_t default_memory_ceiling(const std::string& root, std::string* how) {
  constexpr uint64_t kFloor = uint64_t{64} << 20;
  std::string where;
  if (uint64_t limit = cgroup_limit(root, &where)) {
    *how = "half of memory.max of cgroup " + where + " (" + mib(limit) + ")";
    return std::max(kFloor, limit / 2);
  }
  uint64_t available = mem_available(root);
  *how = "a quarter of MemAvailable (" + mib(available) + ")";
  return std::max(kFloor, available / 4);
}

uint64_t default_state_ceiling(int dir_fd, std::string* how) {
  struct statvfs vfs {};
  if (::fstatvfs(dir_fd, &vfs) != 0) {
    *how = "none: the state directory's file system could not be asked";
    return 0;
  }
  // Its size, not what is free at start: a daemon started on a nearly full
  // disk would refuse every store for good, even after the disk is cleared
  // (what others fill is storage_failed, as before).
  const uint64_t size = static_cast<uint64_t>(vfs.f_blocks) * vfs.f_frsize;
  *how = "a sixth of the state directory's file system, " + mib(size);
  return std::max<uint64_t>(size / 6, 1);
}

uint64_t parse_ceiling(const std::string& text, const char* option, bool* is_auto) {
  *is_auto = text == "auto";
  if (*is_auto || text == "none") return 0;
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string suffix = text.substr(digits);
  int shift = suffix.empty()  ? 0
              : suffix == "K" ? 10
              : suffix == "M" ? 20
              : suffix == "G" ? 30
              : suffix == "T" ? 40
                              : -1;
  if (digits == 0 || digits > 15 || shift < 0)
    throw std::invalid_argument(std::string("--") + option + " takes auto, none, or bytes (" +
                                "a number, optionally with K, M, G or T), not '" + text + "'");
  return std::stoull(text.substr(0, digits)) << shift;
}

}  // namespace muster::daemon
