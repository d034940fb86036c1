#include "contain/cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>

namespace muster::daemon::contain {

namespace {

std::string failed(const std::string& what, int e) {
  return what + ": " + std::strerror(e);
}

// Writes text to a cgroup control file in one write(2): the kernel takes a
// control file's value from a single write.
std::string write_file(const std::string& path, const std::string& text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return failed("cannot open " + path, errno);
  ssize_t n = ::write(fd, text.data(), text.size());
  int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) return failed("cannot write " + path, e);
  return "";
}

// mountinfo fields: id parent major:minor root mountpoint options
// [optional...] - fstype source superoptions. Mount points escape blanks
// as \040; a cgroup mount point has none in practice, so they are kept.
std::string cgroup2_mount(std::string& root) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    auto dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, dev, mount_root, point;
    head >> id >> parent >> dev >> mount_root >> point;
    root = mount_root;
    return point;
  }
  return "";
}

// The cgroup v2 directory named by the "0::" line of a /proc/PID/cgroup file
// (`who` names the process in why_not).
OwnCgroup cgroup_dir_in(const std::string& proc_file, const std::string& who) {
  std::string mount_root;
  std::string mount = cgroup2_mount(mount_root);
  if (mount.empty()) return {"", "no cgroup2 file system is mounted"};
  std::ifstream in(proc_file);
  std::string line, path;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) path = line.substr(3);
  if (path.empty() || path[0] != '/') return {"", who + " has no cgroup v2 path in " + proc_file};
  // A mount of a subtree (a container's) shows paths below its root.
  if (mount_root != "/") {
    if (path.rfind(mount_root, 0) != 0)
      return {"", who + "'s cgroup " + path + " is outside the cgroup2 mount at " + mount};
    path = path.substr(mount_root.size());
  }
  if (path == "/") path.clear();
  return {mount + path, ""};
}

}  // namespace

OwnCgroup own_cgroup() {
  return cgroup_dir_in("/proc/self/cgroup", "this process");
}

std::string cgroup_dir_of(pid_t pid) {
  return cgroup_dir_in("/proc/" + std::to_string(pid) + "/cgroup", "pid " + std::to_string(pid))
      .dir;
}

std::string make(const std::string& dir) {
  // 0755 whatever the umask (the unit's UMask=0077): a worker may read its
  // own cgroup's limits (cpu.max), as container-aware programs do.
  if (::mkdir(dir.c_str(), 0755) == 0) {
    ::chmod(dir.c_str(), 0755);
    return "";
  }
  if (errno == EEXIST) return "";
  return failed("cannot create cgroup " + dir, errno);
}

std::string move(const std::string& dir, pid_t pid) {
  return write_file(dir + "/cgroup.procs", std::to_string(pid));
}

std::string kill_all(const std::string& dir) {
  std::string why = write_file(dir + "/cgroup.kill", "1");
  if (why.empty()) return "";
  // Before 5.14: SIGKILL what is listed, a few rounds for forks in flight.
  for (int round = 0; round < 50; ++round) {
    std::ifstream procs(dir + "/cgroup.procs");
    if (!procs) return why;
    pid_t pid;
    bool found = false;
    while (procs >> pid)
      if (::kill(pid, SIGKILL) == 0) found = true;
    if (!found) break;
    ::usleep(2000);
  }
  return "";
}

bool remove(const std::string& dir) {
  if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return true;
  return false;
}

bool empty(const std::string& dir) {
  std::ifstream in(dir + "/cgroup.events");
  std::string key, value;
  while (in >> key >> value)
    if (key == "populated") return value == "0";
  return false;
}

double age_s(const std::string& dir) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return -1;
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec - st.st_mtim.tv_sec);
}

std::vector<std::string> children(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return names;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type != DT_DIR || e->d_name[0] == '.') continue;
    names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

}  // namespace muster::daemon::contain
