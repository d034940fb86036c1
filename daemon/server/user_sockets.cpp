#include "server/user_sockets.hpp"

#include <dirent.h>
#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>
#include <vector>

#include "dirs/runtime_dir.hpp"
#include "log.hpp"

namespace muster::daemon {

namespace {

// "<uid>.sock" -> uid; false for any other name.
bool uid_of_name(const std::string& name, uid_t* uid) {
  const std::string suffix = ".sock";
  if (name.size() <= suffix.size() || name.size() > 10 + suffix.size() ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return false;
  uint64_t v = 0;
  for (size_t i = 0; i < name.size() - suffix.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    v = v * 10 + static_cast<uint64_t>(name[i] - '0');
  }
  if (v >= static_cast<uid_t>(-1)) return false;
  *uid = static_cast<uid_t>(v);
  return true;
}

}  // namespace

UserSockets::UserSockets(zmq::socket_t& router, std::string dir, uint64_t fd_limit)
    : router_(router),
      dir_(std::move(dir) + "/users"),
      cap_(std::min<uint64_t>(kMaxUserSockets, fd_limit / 16)) {
  // Set aside by the fd guard when the daemon before stopped (an empty
  // users/ is replaced).
  (void)::rename((dir_ + ".full").c_str(), dir_.c_str());
  // 0711: each user reaches their own socket by name, and lists none.
  ::close(make_own_dir(dir_, "refusing the users' socket directory ", "--runtime-dir"));
  if (::chmod(dir_.c_str(), 0711) != 0)
    log::warning("cannot make " + dir_ + " mode 0711: " + std::strerror(errno));
  DIR* d = ::opendir(dir_.c_str());
  if (!d) return;
  std::set<uid_t> found;
  while (dirent* e = ::readdir(d)) {
    uid_t uid;
    if (uid_of_name(e->d_name, &uid)) found.insert(uid);
  }
  ::closedir(d);
  for (uid_t uid : found) {
    if (full()) break;
    bind(uid);
  }
}

void UserSockets::want(int64_t uid) {
  if (uid < 0 || uid >= static_cast<uid_t>(-1)) return;
  const auto u = static_cast<uid_t>(uid);
  if (!bound_.count(u) && !full()) wanted_.insert(u);
}

void UserSockets::want_group(int64_t gid) {
  if (gid < 0) return;
  std::vector<char> buf(1 << 16);
  group g{};
  group* found = nullptr;
  if (::getgrgid_r(static_cast<gid_t>(gid), &g, buf.data(), buf.size(), &found) != 0 || !found)
    return;
  for (char** member = found->gr_mem; member && *member; ++member) {
    std::vector<char> pbuf(16384);
    passwd p{};
    passwd* user = nullptr;
    if (::getpwnam_r(*member, &p, pbuf.data(), pbuf.size(), &user) == 0 && user) want(user->pw_uid);
  }
}

void UserSockets::bind_wanted(bool paused) {
  if (wanted_.empty() || paused) return;
  for (uid_t uid : std::exchange(wanted_, {})) {
    if (full()) return;
    bind(uid);
  }
}

bool UserSockets::full() {
  if (bound_.size() < cap_) return false;
  if (!full_logged_)
    log::notice("users' own sockets: " + std::to_string(cap_) +
                " made; other users connect through the shared socket only");
  full_logged_ = true;
  return true;
}

bool UserSockets::bind(uid_t uid) {
  const std::string path = dir_ + "/" + std::to_string(uid) + ".sock";
  // Whatever is there is the daemon's (the directory is): a socket of a
  // daemon before this one, which no one serves.
  ::unlink(path.c_str());
  try {
    router_.bind("ipc://" + path);
  } catch (const zmq::error_t& e) {
    log::warning("cannot make " + path + ": " + e.what());
    return false;
  }
  // The unit's UMask=0077 made it root's alone until now; without it, a
  // connection made before the chmod is still counted as its own uid's.
  if (::chown(path.c_str(), uid, static_cast<gid_t>(-1)) != 0 || ::chmod(path.c_str(), 0600) != 0) {
    log::warning("cannot give " + path + " to uid " + std::to_string(uid) + ": " +
                 std::strerror(errno));
    ::unlink(path.c_str());  // nobody else may connect through it
  }
  bound_.insert(uid);
  return true;
}

}  // namespace muster::daemon
