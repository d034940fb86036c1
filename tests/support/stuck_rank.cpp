// A rank that may never arrive, for the stuck-wait tests (test_stuck.cpp):
// joins, prints `rank=R pid=P`, then waits where the arguments say and
// prints `done` or `error=<code>` when that wait ends. Usage:
//   muster_stuck_rank JOB LOCAL_WORLD_SIZE LOCAL_RANK OP NAME [SKIP_RANK]
//   muster_stuck_rank - - - OP NAME [SKIP_RANK]     (joins as muster run says)
// OP: barrier (enter barrier NAME), get (wait for key NAME), idle (nothing),
// waitlong (wait for 5 keys of 1,000 bytes each, NAME-0-xxx.. to NAME-4-..).
// With SKIP_RANK, the rank of that global number idles instead: the one
// that never arrives. Then it sleeps until killed.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "muster/client.hpp"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s JOB|- LOCAL_WORLD_SIZE LOCAL_RANK OP NAME [SKIP_RANK]\n",
                 argv[0]);
    return 2;
  }
  try {
    muster::Client c;
    muster::RankInfo r;
    if (std::string(argv[1]) == "-") {
      r = c.join_from_env();
    } else {
      muster::JoinOptions o;
      o.job = argv[1];
      o.local_world_size = static_cast<uint32_t>(std::atoi(argv[2]));
      o.local_rank = std::atoi(argv[3]);
      o.wants_gpu = false;
      r = c.join(o);
    }
    std::string op = argv[4];
    if (argc > 6 && r.rank == static_cast<uint32_t>(std::atoi(argv[6]))) op = "idle";
    std::printf("rank=%u pid=%d op=%s\n", r.rank, static_cast<int>(::getpid()), op.c_str());
    std::fflush(stdout);
    const auto wait = std::chrono::seconds(600);  // longer than any test
    if (op == "barrier")
      c.barrier(argv[5], wait);
    else if (op == "get")
      c.get(argv[5], wait);
    else if (op == "waitlong") {
      std::vector<std::string> keys;
      for (int k = 0; k < 5; ++k) {
        keys.push_back(std::string(argv[5]) + "-" + std::to_string(k) + "-");
        keys.back().resize(1000, 'x');
      }
      c.wait(keys, wait);
    }
    if (op != "idle") std::printf("done\n");
    std::fflush(stdout);
  } catch (const muster::Error& e) {
    std::printf("error=%s %s\n", muster::error_name(e.code()), e.what());
    std::fflush(stdout);
  }
  for (;;) ::pause();
}
