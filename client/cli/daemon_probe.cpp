#include "cli/daemon_probe.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "endpoint.hpp"

namespace muster::cli {

Probe probe_daemon(const std::string& endpoint) {
  const std::string prefix = "ipc://";
  if (endpoint.rfind(prefix, 0) != 0 || endpoint.size() <= prefix.size() ||
      endpoint[prefix.size()] == '@')
    return {};
  std::string path = endpoint.substr(prefix.size());
  sockaddr_un addr{};
  if (path.size() >= sizeof addr.sun_path) return {};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  int err = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? 0 : errno;
  ::close(fd);
  bool system = ipc_dir_of(endpoint) == "/run/muster";
  const std::string start = system ? "start it (systemctl start musterd)"
                                   : "start one (musterd &), or let muster run start its own";
  switch (err) {
    case 0:
      return {};
    case ENOENT:
      return {Reach::kMissing, "no musterd runs at " + path + " (no socket there): " + start + "."};
    case ECONNREFUSED:
      return {Reach::kStale, "the musterd of " + path +
                                 " is gone (its socket is left over, nobody listens): " + start +
                                 "; it takes the stale socket over."};
    case EACCES:
    case EPERM:
      return {Reach::kDenied,
              "you may not use the musterd at " + path + " (permission denied): " +
                  (system ? "ask root to add you to the muster group (usermod -aG muster " +
                                std::string(std::getenv("USER") ? std::getenv("USER") : "USER") +
                                "), then log in again"
                          : "it belongs to another user; set MUSTER_RUNTIME_DIR to a directory "
                            "of your own") +
                  "."};
    default:
      return {Reach::kOther,
              "cannot reach the musterd at " + path + ": " + std::strerror(err) + "."};
  }
}

}  // namespace muster::cli
