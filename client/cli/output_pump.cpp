#include "cli/output_pump.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <map>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cli/posix_io.hpp"

namespace muster::cli {

struct OutputPump::StreamReader {
  struct Stream {
    int fd = -1;
    uint32_t rank = 0;
    int dest = STDOUT_FILENO;
    std::string buf;      // an unfinished line
    int file_fd = -1;     // its log file (--redirects/--tee), -1: none
    bool console = true;  // also to muster run's stdout/stderr
  };
  using Clock = std::chrono::steady_clock;
  bool prefix;
  size_t tail_lines;
  std::vector<Stream> streams;
  std::map<uint32_t, std::deque<std::string>> tails;
  int wake[2] = {-1, -1};
  std::atomic<double> drain_s{0};
  std::thread thread;

  static constexpr size_t kMaxLine = 64 * 1024;  // longer: written out in pieces

  void keep_tail(uint32_t rank, std::string line) {
    if (line.size() > 1000) line = line.substr(0, 1000) + "...";
    auto& t = tails[rank];
    t.push_back(std::move(line));
    while (t.size() > tail_lines) t.pop_front();
  }

  void line_done(Stream& s, std::string line) {
    if (prefix && s.console)
      write_all(s.dest, "[rank" + std::to_string(s.rank) + "]: " + line + "\n");
    if (s.dest == STDERR_FILENO) keep_tail(s.rank, std::move(line));
  }

  void take(Stream& s, const char* data, size_t n) {
    // Without a prefix the bytes go out as they come; lines are still cut
    // for the stderr tail.
    if (s.file_fd >= 0) write_all(s.file_fd, std::string(data, n));
    if (!prefix && s.console) write_all(s.dest, std::string(data, n));
    if (!prefix && s.dest != STDERR_FILENO) return;
    s.buf.append(data, n);
    size_t start = 0;
    for (size_t nl; (nl = s.buf.find('\n', start)) != std::string::npos; start = nl + 1)
      line_done(s, s.buf.substr(start, nl - start));
    s.buf.erase(0, start);
    if (s.buf.size() >= kMaxLine) {
      line_done(s, std::move(s.buf));
      s.buf.clear();
    }
  }

  void end(Stream& s) {
    if (!s.buf.empty()) line_done(s, std::move(s.buf));
    s.buf.clear();
    close_fd(s.fd);
    close_fd(s.file_fd);
  }

  // Reads from every stream poll found ready.
  void read_ready(const std::vector<pollfd>& fds, const std::vector<Stream*>& who,
                  std::vector<char>& chunk) {
    for (size_t i = 0; i < who.size(); ++i) {
      if (!fds[i].revents) continue;
      ssize_t got = read(who[i]->fd, chunk.data(), chunk.size());
      if (got > 0)
        take(*who[i], chunk.data(), static_cast<size_t>(got));
      else if (got == 0 || (errno != EINTR && errno != EAGAIN))
        end(*who[i]);
    }
  }

  void loop() {
    bool finishing = false;
    Clock::time_point deadline{};
    std::vector<char> chunk(64 * 1024);
    for (;;) {
      std::vector<pollfd> fds;
      std::vector<Stream*> who;
      for (auto& s : streams)
        if (s.fd >= 0) {
          fds.push_back({s.fd, POLLIN, 0});
          who.push_back(&s);
        }
      if (fds.empty()) break;
      if (finishing && Clock::now() >= deadline) break;
      if (!finishing) fds.push_back({wake[0], POLLIN, 0});
      int timeout = -1;
      if (finishing)
        timeout = static_cast<int>(
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count() +
            1);
      int n = poll(fds.data(), fds.size(), timeout);
      if (n < 0 && errno != EINTR) break;
      if (n <= 0) continue;
      read_ready(fds, who, chunk);
      if (!finishing && fds.back().revents) {
        finishing = true;
        deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(drain_s.load()));
      }
    }
    // Out of time (a straggler still holds a pipe): what came is written.
    for (auto& s : streams) end(s);
  }
};

OutputPump::OutputPump(bool prefix, size_t tail_lines) : reader_(std::make_unique<StreamReader>()) {
  reader_->prefix = prefix;
  reader_->tail_lines = tail_lines;
  if (pipe2(reader_->wake, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe: ") + strerror(errno));
}

OutputPump::~OutputPump() {
  finish(0);
  close_fd(reader_->wake[0]);
  close_fd(reader_->wake[1]);
  for (auto& s : reader_->streams) {
    close_fd(s.fd);
    close_fd(s.file_fd);
  }
}

namespace {

int open_log(const std::string& path) {
  if (path.empty()) return -1;
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write " + path + ": " + strerror(errno));
  return fd;
}

}  // namespace

void OutputPump::add(Worker& w, const StreamRoutes& routes) {
  int out_file = open_log(routes.out_file);
  int err_file = -1;
  try {
    err_file = open_log(routes.err_file);
  } catch (...) {
    close_fd(out_file);
    throw;
  }
  if (w.out_fd >= 0)
    reader_->streams.push_back({w.out_fd, w.rank, STDOUT_FILENO, {}, out_file, routes.out_console});
  else
    close_fd(out_file);
  if (w.err_fd >= 0)
    reader_->streams.push_back({w.err_fd, w.rank, STDERR_FILENO, {}, err_file, routes.err_console});
  else
    close_fd(err_file);
  w.out_fd = w.err_fd = -1;
}

void OutputPump::start() {
  reader_->thread = std::thread([this] { reader_->loop(); });
}

void OutputPump::finish(double drain_s) {
  if (!reader_->thread.joinable()) return;
  reader_->drain_s = drain_s;
  char c = 1;
  ssize_t n;
  do n = write(reader_->wake[1], &c, 1);
  while (n < 0 && errno == EINTR);
  reader_->thread.join();
}

std::deque<std::string> OutputPump::tail(uint32_t rank) const {
  auto it = reader_->tails.find(rank);
  return it == reader_->tails.end() ? std::deque<std::string>{} : it->second;
}

}  // namespace muster::cli
