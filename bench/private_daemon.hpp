// A private musterd for a benchmark run: spawned from the path given on the
// command line, in a fresh runtime directory, stopped at exit.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "muster/client.hpp"

namespace muster::bench {

class PrivateDaemon {
 public:
  // extra: more musterd arguments (e.g. --state-dir).
  explicit PrivateDaemon(const std::string& musterd, std::vector<std::string> extra = {}) {
    // On tmpfs when there is one, as /run (the service's runtime and state
    // directory) is on a real node: the daemon saves its state with fsync
    // before it answers, which a disk would make the benchmark's subject.
    std::string tmpl =
        std::string(std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp") +
        "/muster-bench-XXXXXX";
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<std::string> args = {musterd,       "--runtime-dir", dir_,
                                       "--log-level", "error",         "--no-config"};
      args.insert(args.end(), extra.begin(), extra.end());
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(musterd.c_str(), argv.data());
      _exit(127);
    }
    endpoint_ = "ipc://" + dir_ + "/musterd.sock";
    for (int i = 0; i < 200; ++i) {
      try {
        if (std::filesystem::exists(dir_ + "/musterd.sock")) {
          Client({endpoint_, std::chrono::milliseconds(200)}).ping();
          return;
        }
      } catch (const Error&) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    throw std::runtime_error("musterd did not start: " + musterd);
  }
  ~PrivateDaemon() {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  const std::string& endpoint() const { return endpoint_; }

 private:
  std::string dir_, endpoint_;
  pid_t pid_ = -1;
};

}  // namespace muster::bench
