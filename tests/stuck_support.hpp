// Helpers of the stuck-wait tests (test_stuck.cpp, test_stuck_cluster.cpp):
// a private musterd whose log the test reads, the stand-in ranks, and
// `muster status` runs.
#pragma once

#include <unistd.h>

#include <chrono>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "muster/client.hpp"
#include "support/muster_cli.hpp"
#include "support/process.hpp"

namespace muster::test {

// muster_stuck_rank lies next to muster_test_rank in the build.
inline std::string stuck_rank_program() {
  std::string rank = program("MUSTER_TEST_RANK");
  return rank.substr(0, rank.rfind('/')) + "/muster_stuck_rank";
}

// `muster run` of `nproc` stand-in ranks (muster_stuck_rank, every rank's
// job, world size and local rank from its environment) as node node_rank
// of job, 2 nodes through coordinator, without GPUs: each rank does
// rank_args (OP NAME [SKIP_RANK]).
inline std::vector<std::string> stuck_run_argv(const std::string& coordinator,
                                               const std::string& job, int nproc, int node_rank,
                                               const std::vector<std::string>& rank_args) {
  std::vector<std::string> argv = {program("MUSTER_TEST_MUSTER"), "run"};
  argv.insert(argv.end(), {"--nnodes", "2", "-n", std::to_string(nproc)});
  argv.insert(argv.end(), {"--coordinator", coordinator, "--job-id", job});
  argv.insert(argv.end(), {"--node-rank", std::to_string(node_rank), "--cpu", "--use-env"});
  argv.insert(argv.end(), {"--local-addr", "127.0.0.1", stuck_rank_program(), "-", "-", "-"});
  argv.insert(argv.end(), rank_args.begin(), rank_args.end());
  return argv;
}

// A private musterd whose stderr (its log) the test reads line by line.
struct LoggedDaemon {
  TempDir dir;
  std::string endpoint = "ipc://" + dir.path() + "/musterd.sock";
  std::unique_ptr<Process> proc;
  std::vector<std::string> log;  // every line read so far

  explicit LoggedDaemon(std::vector<std::string> extra = {}) {
    std::vector<std::string> argv = {program("MUSTER_TEST_MUSTERD"),
                                     "--runtime-dir",
                                     dir.path(),
                                     "--no-config",
                                     "--log-level",
                                     "info"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    proc = std::make_unique<Process>(argv, std::map<std::string, std::string>{}, true);
    bool up = eventually(
        [&] {
          if (access((dir.path() + "/musterd.sock").c_str(), F_OK) != 0) return false;
          try {
            Client c({endpoint, std::chrono::milliseconds(200)});
            return c.status().pid == proc->pid();
          } catch (const Error&) {
            return false;
          }
        },
        std::chrono::seconds(30));
    if (!up) throw std::runtime_error("private musterd did not come up in " + dir.path());
  }
  // Reads the log for `window`; returns how many lines so far contain `what`.
  size_t count(const std::string& what, std::chrono::milliseconds window) {
    auto end = std::chrono::steady_clock::now() + window;
    while (std::chrono::steady_clock::now() < end)
      if (auto line = proc->read_line(std::chrono::milliseconds(50))) log.push_back(*line);
    size_t n = 0;
    for (const auto& l : log) n += l.find(what) != std::string::npos;
    return n;
  }
  std::map<std::string, std::string> env() const { return {{"MUSTER_ENDPOINT", endpoint}}; }
};

struct Ran {
  int rc = -1;
  std::string out;  // stdout and stderr
};

// `muster status ARGS...` against the daemon at endpoint.
inline Ran muster_status(const std::string& endpoint, std::vector<std::string> args) {
  Process p(muster_cmd("status", std::move(args)), {{"MUSTER_ENDPOINT", endpoint}}, true);
  Ran r;
  r.out = p.read_all(std::chrono::seconds(30));
  r.rc = p.wait(std::chrono::seconds(30)).value_or(-1);
  return r;
}

// The job of that id in a `muster status --json` document.
inline nlohmann::json job_of(const std::string& json_text, const std::string& id) {
  auto doc = nlohmann::json::parse(json_text);
  for (const auto& j : doc["jobs"])
    if (j["id"] == id) return j;
  return nullptr;
}

// A stand-in rank's first line: `rank=R pid=P op=OP`.
inline bool joined(Process& p, std::string* line = nullptr) {
  auto l = p.read_line(std::chrono::seconds(30));
  if (line && l) *line = *l;
  return l && l->find("rank=") != std::string::npos;
}

}  // namespace muster::test
