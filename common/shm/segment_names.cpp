#include "shm/segment_names.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <vector>

namespace muster::shm {

namespace {

// FNV-1a: stable across builds and needs no library (the daemon and the
// client must agree on a name's hash).
uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// A zombie is gone too: a SIGKILLed root stays one until its launcher
// reaps it, and the daemon reports its exit before that.
bool gone(int64_t pid) {
  if (pid <= 0) return false;
  if (::kill(static_cast<pid_t>(pid), 0) != 0) return errno == ESRCH;
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/stat", static_cast<long long>(pid));
  std::ifstream in(path);
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = stat.rfind(") ");
  if (close == std::string::npos) return !in.is_open();
  char state = close + 2 < stat.size() ? stat[close + 2] : '?';
  return state == 'Z' || state == 'X';
}

}  // namespace

std::string job_part(const std::string& job) {
  bool plain = !job.empty() && job.size() <= 100 && job[0] != '.' &&
               std::all_of(job.begin(), job.end(), [](unsigned char c) {
                 return std::isalnum(c) || (c && std::strchr("-_:@+", c));
               });
  if (plain) return job;
  char buf[24];
  std::snprintf(buf, sizeof buf, "~%016llx", static_cast<unsigned long long>(fnv1a(job)));
  return buf;
}

std::string job_prefix(const std::string& job) {
  return "muster." + job_part(job) + ".";
}

std::string round_prefix(const std::string& job, uint64_t generation, uint64_t seq, uint32_t rank) {
  return job_prefix(job) + std::to_string(generation) + "." + std::to_string(seq) + ".r" +
         std::to_string(rank) + ".";
}

std::string segment_name(const std::string& job, uint64_t generation, uint64_t seq, uint32_t rank,
                         int64_t pid, uint64_t nonce) {
  char tail[48];
  std::snprintf(tail, sizeof tail, "p%lld.%016llx", static_cast<long long>(pid),
                static_cast<unsigned long long>(nonce));
  return "/" + round_prefix(job, generation, seq, rank) + tail;
}

std::optional<int64_t> creator_of(const std::string& file_name) {
  // The job part has no '.', so ".p<digits>." after ".r<rank>" is the pid.
  auto r = file_name.rfind(".p");
  if (r == std::string::npos) return std::nullopt;
  auto end = file_name.find('.', r + 2);
  if (end == std::string::npos || end == r + 2) return std::nullopt;
  int64_t pid = 0;
  for (size_t i = r + 2; i < end; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(file_name[i]))) return std::nullopt;
    pid = pid * 10 + (file_name[i] - '0');
    if (pid > (int64_t{1} << 32)) return std::nullopt;
  }
  return pid;
}

size_t remove_orphans(const std::string& prefix, int64_t owner_uid) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir("/dev/shm")) {
    while (dirent* e = ::readdir(d)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
      struct stat st {};
      if (owner_uid >= 0 && (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
                             static_cast<int64_t>(st.st_uid) != owner_uid))
        continue;
      names.emplace_back(e->d_name);
    }
    ::closedir(d);
  }
  size_t removed = 0;
  for (const auto& n : names) {
    auto pid = creator_of(n);
    if (pid && gone(*pid) && ::shm_unlink(("/" + n).c_str()) == 0) ++removed;
  }
  return removed;
}

size_t remove_orphans(const std::string& prefix) {
  return remove_orphans(prefix, -1);
}

}  // namespace muster::shm
