#include "trust.hpp"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "muster/error.hpp"

namespace muster::trust {

namespace {

std::string mode_of(mode_t m) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%04o", static_cast<unsigned>(m & 07777));
  return buf;
}

// "neither yours (uid 1000) nor root's": who would have been trusted.
std::string not_trusted() {
  return "neither yours (uid " + std::to_string(::geteuid()) + ") nor root's";
}

[[noreturn]] void refuse(const std::string& sentence) {
  throw Error(ErrorCode::kPermissionDenied, sentence);
}

}  // namespace

bool trusted_uid(int64_t uid) {
  return uid == 0 || uid == static_cast<int64_t>(::geteuid());
}

void check_socket_dir(const std::string& dir) {
  // stat, not lstat: what counts is the directory the connection reaches.
  // A symlink that leads to a directory of ours or root's is harmless.
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0 && errno == ENOENT) {
    // No daemon yet. Made ours now (0700), so that nobody else can make it
    // and listen there before our daemon does: our requests would go to
    // whoever binds first. Where we may not create it (root's /run/muster),
    // nobody but its owner may either.
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) return;
    if (::stat(dir.c_str(), &st) != 0) return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  const std::string what = "refusing musterd's socket directory " + dir + ": ";
  if (!trusted_uid(st.st_uid))
    refuse(what + "it is owned by uid " + std::to_string(st.st_uid) + ", " + not_trusted() +
           ", so its daemon could read what you send; remove it, or set MUSTER_RUNTIME_DIR to a "
           "directory of your own");
  if (st.st_mode & (S_IWGRP | S_IWOTH))
    refuse(what + "its mode " + mode_of(st.st_mode) + " (owner uid " + std::to_string(st.st_uid) +
           ") lets other users replace the socket; make it writable by its owner only");
}

void check_daemon(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof sa.sun_path) return;  // ZeroMQ cannot use it either
  std::memcpy(sa.sun_path, path.data(), path.size());
  const bool abstract = path[0] == '@';
  if (abstract) sa.sun_path[0] = '\0';
  auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + !abstract);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  // A listener whose backlog is full would block connect() for good.
  timeval limit{2, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof limit);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), len);
  int err = errno;
  ucred cred{};
  socklen_t size = sizeof cred;
  bool known = rc == 0 && ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) == 0;
  ::close(fd);
  int64_t uid = cred.uid;
  if (!known) {
    if (rc == 0) return;
    // Anyone may bind an abstract name once it is free: nobody listening
    // there is no daemon to trust later.
    if (abstract)
      throw Error(ErrorCode::kUnavailable,
                  "no musterd listens at " + path +
                      " (an abstract socket is trusted only while its daemon runs)");
    if (err == ENOENT || err == ECONNREFUSED || err == ENOTDIR) return;
    // Not allowed in (a 0660 socket of another group), no answer in time,
    // a signal: the socket file's owner, the uid that bound it, stands in.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return;
    uid = st.st_uid;
  }
  if (!trusted_uid(uid))
    refuse("refusing the musterd at " + path + ": " +
           (known ? "it runs as uid " : "its socket is owned by uid ") + std::to_string(uid) +
           ", " + not_trusted() + ", and could read what you send it");
}

void check_reply_uid(int64_t uid, const std::string& endpoint) {
  if (!trusted_uid(uid))
    refuse("refusing a reply from the musterd at " + endpoint + ": it runs as uid " +
           std::to_string(uid) + ", " + not_trusted());
}

bool parse_peer_address(std::string_view prop, int64_t& uid, int64_t& gid, int64_t& pid) {
  int64_t fields[3];  // uid, gid, pid, read from the end
  for (int i = 2; i >= 0; --i) {
    auto colon = prop.rfind(':');
    if (colon == std::string_view::npos) return false;
    auto digits = prop.substr(colon + 1);
    auto [p, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), fields[i]);
    if (digits.empty() || ec != std::errc() || p != digits.data() + digits.size() || fields[i] < 0)
      return false;
    prop = prop.substr(0, colon);
  }
  uid = fields[0];
  gid = fields[1];
  pid = fields[2];
  return true;
}

}  // namespace muster::trust
