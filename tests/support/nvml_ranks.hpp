// Test support for the NVML tests that run ranks under `muster run`
// (test_nvml_ordinals.cpp, test_nvml_visible.cpp): what the ranks printed
// and which GPUs their job held while they ran.
#pragma once

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "muster/client.hpp"
#include "support/error_code.hpp"
#include "support/muster_cli.hpp"
#include "support/process.hpp"

namespace muster::test {

struct Ran {
  std::set<std::string> lines;  // what the ranks printed, rank prefixes cut
  std::vector<int64_t> leased;  // NVML indices of the GPUs the job held
  std::string output;           // everything, when muster run failed
  std::optional<int> rc;        // muster run's exit code once stopped
};

// `muster run ARGS` (with env) of n ranks that each print a line starting
// "env " and then their rank info ("rank=..."): those lines, and the GPUs
// d leased, read once all n ranks have joined; then muster run is stopped
// (SIGTERM).
inline Ran run_leasing(const TestDaemon& d, const std::vector<std::string>& args,
                       const std::map<std::string, std::string>& env, int n) {
  using namespace std::chrono_literals;
  Process run(muster_cmd("run", args), env, true);
  Ran r;
  int joined = 0;
  while (joined < n) {
    auto line = run.read_line(20s);
    if (!line) break;
    r.output += *line + "\n";
    auto at = line->find("env ");
    if (at == std::string::npos) at = line->find("rank=");
    if (at == std::string::npos) continue;
    r.lines.insert(line->substr(at));
    if (line->find("rank=", at) == at) ++joined;
  }
  if (joined == n)
    for (const auto& g : Client({d.endpoint()}).status().devices)
      if (g.in_use) r.leased.push_back(g.index);
  run.signal(SIGTERM);
  r.output += run.read_all(10s);
  r.rc = run.wait(10s);
  return r;
}

// How a rank that joins d by itself (job "outside", one rank, a GPU), not
// under muster run, fares with CUDA_VISIBLE_DEVICES=cvd in this process:
// outcome() of its join. CUDA_VISIBLE_DEVICES is unset afterwards.
inline std::string join_alone_under(const TestDaemon& d, const std::string& cvd) {
  ::setenv("CUDA_VISIBLE_DEVICES", cvd.c_str(), 1);
  const std::string joined = outcome([&] { Client({d.endpoint()}).join({"outside", 1, true, 0}); });
  ::unsetenv("CUDA_VISIBLE_DEVICES");
  return joined;
}

// The rank info line of local rank local_rank of 2 on this device.
inline std::string rank_line(int local_rank, int device) {
  return "rank=" + std::to_string(local_rank) + " local_rank=" + std::to_string(local_rank) +
         " world_size=2 device=" + std::to_string(device) + " generation=0";
}

}  // namespace muster::test
