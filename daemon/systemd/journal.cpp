#include "systemd/journal.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "log.hpp"
#include "muster_config.h"

#if HAVE_SYSTEMD
#include <systemd/sd-journal.h>
#endif

namespace muster::daemon::systemd {

namespace {

int g_file = -1;  // MUSTER_LOG_SINK=file:PATH

void to_file(log::Level level, std::string_view line, const log::Fields& f) {
  std::string entry;
  for (const auto& field : log::journal_fields(level, line, f)) entry += field + "\n";
  entry += "\n";
  // One write() per entry (O_APPEND): entries stay whole across threads.
  ssize_t r = ::write(g_file, entry.data(), entry.size());
  (void)r;
}

#if HAVE_SYSTEMD
void to_journal(log::Level level, std::string_view line, const log::Fields& f) {
  auto fields = log::journal_fields(level, line, f);
  std::vector<iovec> iov;
  iov.reserve(fields.size());
  for (auto& s : fields) iov.push_back({s.data(), s.size()});
  sd_journal_sendv(iov.data(), static_cast<int>(iov.size()));
}
#endif

}  // namespace

bool stream_is_journal(const char* journal_stream, int fd) {
  if (!journal_stream || !*journal_stream) return false;
  unsigned long long dev = 0, ino = 0;
  if (std::sscanf(journal_stream, "%llu:%llu", &dev, &ino) != 2) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0) return false;
  return st.st_dev == dev && st.st_ino == ino;
}

std::string install_log_sink() {
  const char* want = std::getenv("MUSTER_LOG_SINK");
  std::string w = want ? want : "";
  if (w.rfind("file:", 0) == 0) {
    std::string path = w.substr(5);
    g_file = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (g_file < 0)
      throw std::runtime_error("MUSTER_LOG_SINK: cannot open " + path + ": " +
                               std::strerror(errno));
    log::set_sink(to_file);
    return "logging to " + path + " (MUSTER_LOG_SINK)";
  }
  if (!w.empty() && w != "journal" && w != "stderr")
    throw std::runtime_error("MUSTER_LOG_SINK must be journal, stderr or file:PATH, not '" + w +
                             "'");
  bool journal = w == "journal" ||
                 (w.empty() && stream_is_journal(std::getenv("JOURNAL_STREAM"), STDERR_FILENO));
  if (!journal) return "";
#if HAVE_SYSTEMD
  log::set_sink(to_journal);
  return "logging to the journal, with JOB=, RANK=, GPU= and PEER= fields";
#else
  if (w == "journal")
    throw std::runtime_error("MUSTER_LOG_SINK=journal: musterd was built without libsystemd");
  return "";
#endif
}

}  // namespace muster::daemon::systemd
