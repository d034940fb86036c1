#include "server/runtime_dir.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "muster/error.hpp"

namespace muster::daemon {

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
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw Error(ErrorCode::kInternal, "cannot stat " + dir + ": " + std::strerror(errno));
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  const std::string what =
      (option == "--state-dir" ? "refusing state directory " : "refusing runtime directory ") +
      dir + ": ";
  const std::string me = std::to_string(::geteuid());
  const std::string owner = std::to_string(st.st_uid);
  const std::string choose = "; remove it or choose another with " + option;
  // A symlink could lead anywhere, into a directory of another user's too.
  if (S_ISLNK(st.st_mode))
    throw Error(ErrorCode::kPermissionDenied,
                what + "it is a symbolic link (owned by uid " + owner + ")" + choose);
  if (!S_ISDIR(st.st_mode))
    throw Error(ErrorCode::kPermissionDenied, what + "it is not a directory" + choose);
  // Its owner may read our state file and replace our socket.
  if (st.st_uid != ::geteuid())
    throw Error(ErrorCode::kPermissionDenied, what + "it is owned by uid " + owner +
                                                  ", not by uid " + me +
                                                  " (this daemon's user), mode " + mode + choose);
  // So may anyone who can write to it, sticky bit or not (they could create
  // a file of ours before we do).
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    throw Error(ErrorCode::kPermissionDenied,
                what + "its mode " + mode + " (owner uid " + owner +
                    ") lets other users write to it; make it writable by its owner only "
                    "(chmod go-w) or choose another with " +
                    option);
  if (!root && (st.st_mode & 077)) ::chmod(dir.c_str(), 0700);
}

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace muster::daemon
