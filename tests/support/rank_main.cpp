// A stand-in training process for the tests: joins a job, prints its rank
// info as one line, then does what the arguments say and waits for stdin to
// close (or sleeps). Usage:
//   muster_test_rank JOB LOCAL_WORLD_SIZE [LOCAL_RANK|-1] [gpu|cpu] [barrier NAME]
//   muster_test_rank env   joins as `muster run` says (join_from_env), and
//                          also prints the job as the daemon spelled it
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "muster/client.hpp"

int main(int argc, char** argv) {
  if (argc == 2 && std::string(argv[1]) == "env") {
    try {
      muster::Client c;
      auto r = c.join_from_env();
      std::printf("rank=%u local_rank=%u world_size=%u job=%s\n", r.rank, r.local_rank,
                  r.world_size, r.job.c_str());
      return 0;
    } catch (const muster::Error& e) {
      std::printf("error=%s message=%s\n", muster::error_name(e.code()), e.what());
      return 1;
    }
  }
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s JOB LOCAL_WORLD_SIZE [LOCAL_RANK] [gpu|cpu] [barrier NAME]\n",
                 argv[0]);
    return 2;
  }
  try {
    muster::Client c;
    muster::JoinOptions o;
    o.job = argv[1];
    o.local_world_size = static_cast<uint32_t>(std::atoi(argv[2]));
    if (argc > 3) o.local_rank = std::atoi(argv[3]);
    if (argc > 4) o.wants_gpu = std::string(argv[4]) != "cpu";
    auto r = c.join(o);
    std::printf("rank=%u local_rank=%u world_size=%u device=%d generation=%llu\n", r.rank,
                r.local_rank, r.world_size, r.device,
                static_cast<unsigned long long>(r.generation));
    std::fflush(stdout);
    if (argc > 6 && std::string(argv[5]) == "barrier") {
      c.barrier(argv[6], std::chrono::seconds(20));
      std::printf("barrier passed\n");
      std::fflush(stdout);
    }
  } catch (const muster::Error& e) {
    std::printf("error=%s message=%s\n", muster::error_name(e.code()), e.what());
    return 1;
  }
  sleep(60);
  return 0;
}
