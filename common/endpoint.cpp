#include "endpoint.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace muster {

namespace {
std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}
}  // namespace

std::string default_runtime_dir() {
  if (geteuid() == 0) return "/run/muster";
  if (auto xdg = env("XDG_RUNTIME_DIR"); !xdg.empty()) return xdg + "/muster";
  return "/tmp/muster-" + std::to_string(geteuid());
}

std::string endpoint_for_dir(const std::string& runtime_dir) {
  return "ipc://" + runtime_dir + "/musterd.sock";
}

std::string resolve_endpoint() {
  if (auto e = env("MUSTER_ENDPOINT"); !e.empty()) return e;
  if (auto d = env("MUSTER_RUNTIME_DIR"); !d.empty()) return endpoint_for_dir(d);
  auto own = default_runtime_dir();
  // A user (a member of the muster group) reaches the node's system daemon
  // when no daemon of their own runs.
  if (geteuid() != 0 && ::access((own + "/musterd.sock").c_str(), F_OK) != 0 &&
      ::access("/run/muster/musterd.sock", F_OK) == 0)
    return endpoint_for_dir("/run/muster");
  return endpoint_for_dir(own);
}

std::string ipc_dir_of(const std::string& endpoint) {
  const std::string prefix = "ipc://";
  if (endpoint.rfind(prefix, 0) != 0) return "";
  auto path = endpoint.substr(prefix.size());
  auto slash = path.rfind('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

std::string personal_endpoint(const std::string& endpoint) {
  const std::string shared = "/musterd.sock";
  if (endpoint.rfind("ipc://", 0) != 0 || endpoint.size() <= shared.size() ||
      endpoint.compare(endpoint.size() - shared.size(), shared.size(), shared) != 0)
    return endpoint;
  const std::string path = ipc_dir_of(endpoint) + "/users/" + std::to_string(geteuid()) + ".sock";
  struct stat st {};
  // The caller's own: anyone else's socket there (were the directory not
  // the daemon's) is not taken for it.
  if (::lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_uid != geteuid())
    return endpoint;
  return "ipc://" + path;
}

}  // namespace muster
