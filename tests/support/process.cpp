#include "support/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "muster/client.hpp"

extern char** environ;

namespace muster::test {

std::map<std::string, std::string> measured_memory_env() {
  const char* asan = std::getenv("ASAN_OPTIONS");
  return {{"ASAN_OPTIONS", std::string(asan ? asan : "") +
                               ":quarantine_size_mb=0:thread_local_quarantine_size_kb=0"}};
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string slurp_or_missing(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return f ? slurp(path) : "<missing>";
}

void spit(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

std::string program(const char* env_var) {
  const char* p = std::getenv(env_var);
  if (!p || !*p)
    throw std::runtime_error(std::string(env_var) + " is not set (run through meson test)");
  return p;
}

TempDir::TempDir() {
  char tmpl[] = "/tmp/muster-test-XXXXXX";
  if (!mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Process::Process(const std::vector<std::string>& argv,
                 const std::map<std::string, std::string>& env, bool merge_stderr) {
  std::vector<std::string> envs;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (!env.count(kv.substr(0, kv.find('=')))) envs.push_back(kv);
  }
  for (const auto& [k, v] : env)
    if (!v.empty()) envs.push_back(k + "=" + v);
  std::vector<char*> cargv, cenv;
  for (auto& s : argv) cargv.push_back(const_cast<char*>(s.c_str()));
  cargv.push_back(nullptr);
  for (auto& s : envs) cenv.push_back(const_cast<char*>(s.c_str()));
  cenv.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe failed");
  pid_ = fork();
  if (pid_ == 0) {
    dup2(fds[1], STDOUT_FILENO);
    if (merge_stderr) dup2(fds[1], STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execvpe(cargv[0], cargv.data(), cenv.data());
    _exit(127);
  }
  close(fds[1]);
  out_fd_ = fds[0];
}

Process::~Process() {
  if (!status_) {
    ::kill(pid_, SIGKILL);
    wait(std::chrono::seconds(5));
  }
  if (out_fd_ >= 0) close(out_fd_);
}

std::optional<std::string> read_line_from(int fd, std::string& buf,
                                          std::chrono::milliseconds timeout, bool peek) {
  auto end = std::chrono::steady_clock::now() + timeout;
  for (bool first = true;; first = false) {
    if (auto nl = buf.find('\n'); nl != std::string::npos) {
      auto line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      return line;
    }
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                    end - std::chrono::steady_clock::now())
                    .count();
    if (left <= 0 && !(peek && first)) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 0))) <= 0) {
      if (left <= 0) return std::nullopt;
      continue;
    }
    char chunk[4096];
    ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n <= 0) return std::nullopt;
    buf.append(chunk, static_cast<size_t>(n));
  }
}

std::optional<std::string> Process::read_line(std::chrono::milliseconds timeout) {
  return read_line_from(out_fd_, buffer_, timeout);
}

std::string Process::read_all(std::chrono::milliseconds timeout) {
  std::string all;
  while (auto line = read_line(timeout)) all += *line + "\n";
  all += buffer_;
  buffer_.clear();
  return all;
}

std::optional<int> Process::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  auto end = std::chrono::steady_clock::now() + timeout;
  do {
    int st;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      return status_;
    }
    usleep(5000);
  } while (std::chrono::steady_clock::now() < end);
  return std::nullopt;
}

void Process::signal(int sig) {
  ::kill(pid_, sig);
}

namespace {

// /proc/PID/stat after the command's closing parenthesis ("S 1234 ..."):
// the name may hold spaces and parentheses of its own. "" when gone.
std::string stat_after_comm(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (!f) return "";
  char buf[512] = {0};
  size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string s(buf, n);
  auto p = s.rfind(')');
  return p != std::string::npos && p + 2 < s.size() ? s.substr(p + 2) : "";
}

}  // namespace

bool process_exists(pid_t pid) {
  if (::kill(pid, 0) != 0) return false;
  // A zombie is not a running process.
  std::string rest = stat_after_comm(pid);
  return !rest.empty() && rest[0] != 'Z';
}

pid_t parent_of(pid_t pid) {
  std::istringstream rest(stat_after_comm(pid));
  char state = 0;
  pid_t ppid = 0;
  rest >> state >> ppid;
  return ppid;
}

TestDaemon::TestDaemon(std::vector<std::string> extra_args, std::map<std::string, std::string> env,
                       std::vector<std::string> wrapper)
    : env_(std::move(env)) {
  argv_ = std::move(wrapper);
  for (std::string a : {program("MUSTER_TEST_MUSTERD"), std::string("--runtime-dir"), dir_.path()})
    argv_.push_back(a);
  // Quiet, unless the test asks for another level.
  if (std::find(extra_args.begin(), extra_args.end(), "--log-level") == extra_args.end())
    argv_.insert(argv_.end(), {"--log-level", "warning"});
  // Never the machine's /etc/muster/musterd.conf, unless a test gives a file.
  if (std::find(extra_args.begin(), extra_args.end(), "--config") == extra_args.end())
    argv_.push_back("--no-config");
  argv_.insert(argv_.end(), extra_args.begin(), extra_args.end());
  endpoint_ = "ipc://" + dir_.path() + "/musterd.sock";
  start();
}

std::string TestDaemon::peer_endpoint() const {
  std::string ep;
  if (!eventually(
          [&] {
            std::ifstream(dir_.path() + "/peer-endpoint") >> ep;
            return !ep.empty();
          },
          std::chrono::seconds(10)))
    throw std::runtime_error("musterd wrote no peer-endpoint in " + dir_.path());
  return ep;
}

void TestDaemon::start() {
  proc_ = std::make_unique<Process>(argv_, env_);
  bool up = eventually(
      [&] {
        if (access((dir_.path() + "/musterd.sock").c_str(), F_OK) != 0) return false;
        try {
          Client c({endpoint_, std::chrono::milliseconds(200)});
          return c.status().pid == proc_->pid();  // not a socket file left by the last one
        } catch (const Error&) {
          return false;
        }
      },
      std::chrono::seconds(30));  // generous: CI runs tests in parallel on 2 cores
  if (!up) throw std::runtime_error("private musterd did not come up in " + dir_.path());
}

void TestDaemon::start(const std::vector<std::string>& more_args) {
  argv_.insert(argv_.end(), more_args.begin(), more_args.end());
  start();
}

void TestDaemon::kill9() {
  proc_->signal(SIGKILL);
  if (!proc_->wait(std::chrono::seconds(10)))
    throw std::runtime_error("musterd did not die of SIGKILL");
}

std::optional<int> TestDaemon::stop(std::chrono::milliseconds timeout) {
  proc_->signal(SIGTERM);
  return proc_->wait(timeout);
}

TestDaemon::~TestDaemon() {
  if (proc_->wait(std::chrono::milliseconds(0))) return;  // killed and not started again
  proc_->signal(SIGTERM);
  if (!proc_->wait(std::chrono::seconds(5))) proc_->signal(SIGKILL);
}

Rank::Rank(const TestDaemon& d, const std::string& job, int local_world_size, int local_rank,
           const char* gpu, const std::vector<std::string>& extra) {
  std::vector<std::string> argv = {program("MUSTER_TEST_RANK"), job,
                                   std::to_string(local_world_size), std::to_string(local_rank),
                                   gpu};
  argv.insert(argv.end(), extra.begin(), extra.end());
  proc = std::make_unique<Process>(
      argv, std::map<std::string, std::string>{{"MUSTER_ENDPOINT", d.endpoint()}});
  line = proc->read_line(std::chrono::seconds(10)).value_or("");
  std::smatch m;
  if (std::regex_search(line, m, std::regex("device=(-?\\d+)"))) device = std::stoi(m[1]);
}

}  // namespace muster::test
