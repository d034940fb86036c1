#include "dirs/runtime_dir.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "muster/error.hpp"

namespace muster::daemon {

namespace {

void check_ancestors(const std::string& dir, const std::string& what, const std::string& option) {
  const std::string choose = "; choose another with " + option;
  auto slash = dir.rfind('/');
  std::string parent = slash == 0 ? "/" : dir.substr(0, slash);
  char* real = ::realpath(parent.c_str(), nullptr);
  if (!real) return;  // the open below says what is wrong
  std::string path = real;
  std::free(real);
  for (;;) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return;
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    if (st.st_uid != 0 && st.st_uid != ::geteuid())
      throw Error(ErrorCode::kPermissionDenied,
                  what + "the directory above it, " + path + ", is owned by uid " +
                      std::to_string(st.st_uid) + " (mode " + mode +
                      "), who could swap the path for another" + choose);
    if ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX))
      throw Error(ErrorCode::kPermissionDenied,
                  what + "the directory above it, " + path + ", has mode " + mode +
                      ": others may write to it (no sticky bit) and could swap the path for "
                      "another" +
                      choose);
    if (path == "/") return;
    auto up = path.rfind('/');
    path = up == 0 ? "/" : path.substr(0, up);
  }
}

}  // namespace

void prepare_runtime_dir(const std::string& path, const std::string& option) {
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();  // lstat must see dir itself
  const bool root = ::geteuid() == 0;
  // Parents first; an existing level is fine (its owner is not ours to judge).
  for (size_t pos = dir.find('/', 1);; pos = dir.find('/', pos + 1)) {
    std::string part = dir.substr(0, pos);
    mode_t mode = pos == std::string::npos && !root ? 0700 : 0755;
    if (::mkdir(part.c_str(), mode) != 0 && errno != EEXIST)
      throw Error(ErrorCode::kInternal, "cannot create " + part + ": " + std::strerror(errno));
    if (pos == std::string::npos) break;
  }
  const std::string what =
      (option == "--state-dir" ? "refusing state directory " : "refusing runtime directory ");
  int fd = open_own_dir(dir, what, option);
  struct stat st {};
  if (!root && ::fstat(fd, &st) == 0 && (st.st_mode & 077)) ::fchmod(fd, 0700);
  ::close(fd);
}

int make_own_dir(const std::string& dir, const std::string& what_prefix,
                 const std::string& option) {
  if (::mkdir(dir.c_str(), 0755) == 0)
    ::chmod(dir.c_str(), 0755);
  else if (errno != EEXIST)
    throw Error(ErrorCode::kInternal,
                option + " " + dir + ": cannot create it: " + std::strerror(errno));
  return open_own_dir(dir, what_prefix, option);
}

int open_own_dir(const std::string& path, const std::string& what_prefix,
                 const std::string& option) {
  std::string dir = path;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  const std::string what = what_prefix + dir + ": ";
  const std::string choose = "; remove it or choose another with " + option;
  // Whoever may rename an ancestor may swap the whole path for one of
  // theirs after the check: every directory above must be root's or ours,
  // and writable by others only with the sticky bit (as /tmp is), which
  // keeps them from renaming what is not theirs.
  check_ancestors(dir, what, option);
  // O_NOFOLLOW: a link planted at the last component is refused, not
  // entered; what the descriptor names is then checked, so nothing can
  // swap the directory between the check and its use.
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st {};
  if (fd < 0) {
    int err = errno;
    if (::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
      throw Error(ErrorCode::kPermissionDenied, what + "it is a symbolic link (owned by uid " +
                                                    std::to_string(st.st_uid) + ")" + choose);
    if (err == ENOTDIR)
      throw Error(ErrorCode::kPermissionDenied, what + "it is not a directory" + choose);
    throw Error(ErrorCode::kInternal, "cannot open " + dir + ": " + std::strerror(err));
  }
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error(ErrorCode::kInternal, "cannot stat " + dir + ": " + std::strerror(err));
  }
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  const std::string me = std::to_string(::geteuid());
  const std::string owner = std::to_string(st.st_uid);
  // Its owner may read our files and replace them.
  if (st.st_uid != ::geteuid()) {
    ::close(fd);
    throw Error(ErrorCode::kPermissionDenied, what + "it is owned by uid " + owner +
                                                  ", not by uid " + me +
                                                  " (this daemon's user), mode " + mode + choose);
  }
  // So may anyone who can write to it, sticky bit or not (they could create
  // a file of ours before we do).
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    ::close(fd);
    throw Error(ErrorCode::kPermissionDenied,
                what + "its mode " + mode + " (owner uid " + owner +
                    ") lets other users write to it; make it writable by its owner only "
                    "(chmod go-w) or choose another with " +
                    option);
  }
  return fd;
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace muster::daemon
