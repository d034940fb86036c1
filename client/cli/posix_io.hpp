// Small POSIX helpers shared by the launcher's parts.
#pragma once

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <string>
#include <vector>

namespace muster::cli {

// A user name or a uid number (--owner); -1 when it is neither.
inline int64_t uid_of(const std::string& who) {
  if (!who.empty() && who.find_first_not_of("0123456789") == std::string::npos &&
      who.size() <= 10) {
    auto n = std::stoll(who);
    return n <= 0xffffffffLL ? n : -1;
  }
  if (const passwd* pw = ::getpwnam(who.c_str())) return pw->pw_uid;
  return -1;
}

// This machine's name; "" when the kernel gives none.
inline std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "";
  return buf;
}

inline void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

inline void write_all(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // our stdout is gone: nothing better to do
    off += static_cast<size_t>(n);
  }
}

// argv/envp for exec: pointers into v, which must outlive them.
inline std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace muster::cli
