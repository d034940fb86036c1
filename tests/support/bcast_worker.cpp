// A rank that takes part in one broadcast through a segment
// (MUSTER_BCAST=shm is the caller's): joins JOB as local rank RANK of
// WORLD, prints "pid=PID rank=R", then rank 0 broadcasts SIZE bytes at once
// while the others wait DELAY seconds before they read, so that the root
// sits in the broadcast with its segment made. Afterwards each prints
// "bcast=ok" or "bcast=<error name>" and sleeps, so that a surviving rank
// stays alive (and its job with it) while the test looks.
// Usage: muster_test_bcast JOB WORLD RANK SIZE DELAY
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "muster/broadcast.hpp"
#include "muster/client.hpp"

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: %s JOB WORLD RANK SIZE DELAY\n", argv[0]);
    return 2;
  }
  muster::JoinOptions o;
  o.job = argv[1];
  o.local_world_size = static_cast<uint32_t>(std::atoi(argv[2]));
  o.local_rank = std::atoi(argv[3]);
  o.wants_gpu = false;
  size_t size = std::strtoull(argv[4], nullptr, 10);
  unsigned delay = static_cast<unsigned>(std::atoi(argv[5]));
  muster::Client c;
  auto me = c.join(o);
  std::printf("pid=%d rank=%u\n", ::getpid(), me.rank);
  std::fflush(stdout);
  std::vector<char> buf(size, me.rank == 0 ? 'x' : 0);
  if (me.rank != 0) ::sleep(delay);
  try {
    muster::broadcast(c, buf.data(), buf.size(), 0);
    std::printf("bcast=ok\n");
  } catch (const muster::Error& e) {
    std::printf("bcast=%s\n", muster::error_name(e.code()));
  }
  std::fflush(stdout);
  ::sleep(60);
  return 0;
}
