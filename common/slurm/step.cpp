#include "slurm/step.hpp"

#include <unistd.h>

#include <cctype>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

namespace muster::slurm {

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  std::istringstream in(path);
  for (std::string c; std::getline(in, c, '/');)
    if (!c.empty()) out.push_back(c);
  return out;
}

bool digits(const std::string& s) {
  return !s.empty() && s.size() <= 19 && s.find_first_not_of("0123456789") == std::string::npos;
}

// A step id as Slurm writes it in paths and titles: a number, or one of
// its named steps.
bool step_word(const std::string& s) {
  return digits(s) || s == "batch" || s == "extern" || s == "interactive";
}

// "job_J", "step_S" below the hierarchy's Slurm root, which starts at c[at].
std::optional<Step> job_and_step(const std::vector<std::string>& c, size_t at) {
  if (c.size() < at + 2 || c[at].rfind("job_", 0) != 0 || c[at + 1].rfind("step_", 0) != 0)
    return std::nullopt;
  std::string job = c[at].substr(4), step = c[at + 1].substr(5);
  if (!digits(job) || !step_word(step)) return std::nullopt;
  return Step{std::stoull(job), step};
}

struct Status {
  int64_t ppid = -1;
  bool all_root = false;
};

Status status_of(const std::string& dir) {
  Status st;
  std::istringstream in(read_file(dir + "/status"));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("PPid:", 0) == 0) st.ppid = std::atoll(line.c_str() + 5);
    if (line.rfind("Uid:", 0) == 0) {
      std::istringstream ids(line.substr(4));
      long long a = -1, b = -1, c = -1, d = -1;
      ids >> a >> b >> c >> d;
      st.all_root = a == 0 && b == 0 && c == 0 && d == 0;
    }
  }
  return st;
}

std::string link_target(const std::string& path) {
  char buf[4096];
  ssize_t n = ::readlink(path.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

}  // namespace

std::optional<Step> step_from_cgroup(const std::string& cgroup_text) {
  std::istringstream in(cgroup_text);
  for (std::string line; std::getline(in, line);) {
    // "HIERARCHY:CONTROLLERS:PATH"; the path may hold ':' itself.
    auto a = line.find(':');
    auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    auto c = components(line.substr(b + 1));
    // v1: /slurm/uid_U/job_J/step_S; v2: /system.slice/slurmstepd.scope/job_J/step_S
    if (c.size() >= 4 && c[0] == "slurm" && c[1].rfind("uid_", 0) == 0 && digits(c[1].substr(4)))
      if (auto s = job_and_step(c, 2)) return s;
    if (c.size() >= 4 && c[0] == "system.slice" && c[1] == "slurmstepd.scope")
      if (auto s = job_and_step(c, 2)) return s;
  }
  return std::nullopt;
}

std::optional<Step> step_from_stepd_cmdline(const std::string& cmdline) {
  // setproctitle leaves the title NUL- or space-padded.
  const std::string head = "slurmstepd: [";
  if (cmdline.rfind(head, 0) != 0) return std::nullopt;
  auto close = cmdline.find(']', head.size());
  if (close == std::string::npos) return std::nullopt;
  std::string id = cmdline.substr(head.size(), close - head.size());
  auto dot = id.find('.');
  if (dot == std::string::npos || !digits(id.substr(0, dot)) || !step_word(id.substr(dot + 1)))
    return std::nullopt;
  return Step{std::stoull(id.substr(0, dot)), id.substr(dot + 1)};
}

std::optional<Step> step_of(int64_t pid, const Proc& proc) {
  if (pid <= 0) return std::nullopt;
  const std::string dir = proc.root + "/" + std::to_string(pid);
  if (auto s = step_from_cgroup(read_file(dir + "/cgroup"))) return s;
  // Up the ancestry; a chain longer than this is no process tree of a node.
  int64_t at = status_of(dir).ppid;
  for (int depth = 0; at > 1 && depth < 64; ++depth) {
    const std::string up = proc.root + "/" + std::to_string(at);
    Status st = status_of(up);
    std::string exe = link_target(up + "/exe");
    // An executable replaced while it runs (an upgrade) reads "... (deleted)".
    if (const std::string gone = " (deleted)";
        exe.size() > gone.size() && exe.compare(exe.size() - gone.size(), gone.size(), gone) == 0)
      exe.resize(exe.size() - gone.size());
    std::string base = exe.substr(exe.rfind('/') + 1);
    // Debian installs it as slurmstepd-wlm (slurmstepd is the alternative's link).
    if (st.all_root && (base == "slurmstepd" || base.rfind("slurmstepd-", 0) == 0))
      if (auto s = step_from_stepd_cmdline(read_file(up + "/cmdline"))) {
        s->stepd = at;
        return s;
      }
    at = st.ppid;
  }
  return std::nullopt;
}

}  // namespace muster::slurm
