#include "metrics/process.hpp"

#include <dirent.h>
#include <sys/resource.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "muster_config.h"

namespace muster::daemon::metrics {

namespace {

using Type = TextWriter::Type;

// The fields of /proc/self/stat after the command name (which may hold
// spaces and parentheses: it ends at the last ')').
bool stat_fields(std::vector<double>& out) {
  std::ifstream in("/proc/self/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto close = all.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(all.substr(close + 1));
  // Numbers only; the state letter (field 3) reads as NaN, unused.
  for (std::string f; rest >> f;) {
    char* end = nullptr;
    double v = std::strtod(f.c_str(), &end);
    out.push_back(end && *end == '\0' ? v : std::nan(""));
  }
  return out.size() > 22;
}

double open_fds() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  double n = 0;
  while (auto* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n - 1;  // the directory's own fd
}

}  // namespace

void process_families(TextWriter& w) {
  w.family("muster_build_info", Type::kGauge,
           "always 1; the labels say which musterd this is and what it was built with");
  w.sample("muster_build_info",
           {{"version", MUSTER_VERSION},
            {"cuda", HAVE_CUDA ? "yes" : "no"},
            {"nccl", HAVE_NCCL ? "yes" : "no"},
            {"systemd", HAVE_SYSTEMD ? "yes" : "no"}},
           1);
  // Field numbers of proc(5) less the two before the name's end: state is 0.
  std::vector<double> f;
  const double tick = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (stat_fields(f) && tick > 0) {
    w.single("process_cpu_seconds_total", Type::kCounter, "user and system CPU time spent, seconds",
             (f[11] + f[12]) / tick);  // utime, stime
    w.single("process_virtual_memory_bytes", Type::kGauge, "virtual memory size, bytes",
             f[20]);  // vsize
    w.single("process_resident_memory_bytes", Type::kGauge, "resident memory size, bytes",
             f[21] * page);  // rss
    // starttime is in ticks since boot; boot time from the clock and uptime.
    struct sysinfo si {};
    if (::sysinfo(&si) == 0) {
      double boot = static_cast<double>(std::time(nullptr)) - static_cast<double>(si.uptime);
      w.single("process_start_time_seconds", Type::kGauge,
               "start time of the process since the Unix epoch, seconds", boot + f[19] / tick);
    }
  }
  if (double fds = open_fds(); fds >= 0) {
    w.single("process_open_fds", Type::kGauge, "open file descriptors", fds);
  }
  if (rlimit r{}; ::getrlimit(RLIMIT_NOFILE, &r) == 0) {
    w.single("process_max_fds", Type::kGauge, "the limit of open file descriptors",
             static_cast<double>(r.rlim_cur));
  }
}

}  // namespace muster::daemon::metrics
