// A stand-in rank of a multi-node job, started by `muster run --use-env`:
// joins from the environment, then prints one `key=value ...` line per
// service so that the test can compare ranks:
//   rank=.. local_rank=.. world=.. node=.. nodes=.. generation=..
//   id=<fnv of the 128-byte NCCL id> ids=<fnv of 2 scalable-init ids>
//   store=ok (every rank read every other rank's key after a barrier)
//   shard=<count>:<fnv of the indices> (n=1000, epoch 3, seed 7, shuffle)
// With the argument `hold`, it then waits for a key nobody sets and prints
// `wait_error=<code> <message>` when that wait fails (a node was lost);
// `hold-nosigterm` does the same but ignores SIGTERM, so that the test sees
// the failed wait even when muster run stops the group at the same moment.
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "muster/client.hpp"

namespace {
uint64_t fnv(const void* p, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i)
    h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}
}  // namespace

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  bool hold = mode == "hold" || mode == "hold-nosigterm";
  if (mode == "hold-nosigterm") std::signal(SIGTERM, SIG_IGN);
  try {
    muster::Client c;
    auto r = c.join_from_env();
    std::printf("rank=%u local_rank=%u world=%u node=%u nodes=%u generation=%llu\n", r.rank,
                r.local_rank, r.world_size, r.node_rank, r.num_nodes,
                static_cast<unsigned long long>(r.generation));
    auto id = c.nccl_unique_id("world", std::chrono::seconds(30));
    auto ids = c.nccl_unique_ids(2, "scalable", std::chrono::seconds(30));
    std::string both = ids.at(0) + ids.at(1);
    std::printf("id=%016llx ids=%016llx\n",
                static_cast<unsigned long long>(fnv(id.data(), id.size())),
                static_cast<unsigned long long>(fnv(both.data(), both.size())));
    c.set("worker/" + std::to_string(r.rank), std::to_string(r.rank * 7));
    c.barrier("written", std::chrono::seconds(30));
    bool ok = true;
    for (uint32_t k = 0; k < r.world_size; ++k)
      ok = ok &&
           c.get("worker/" + std::to_string(k), std::chrono::seconds(5)) == std::to_string(k * 7);
    std::printf("store=%s\n", ok ? "ok" : "WRONG");
    muster::Client::ShardOptions so;
    so.dataset_size = 1000;
    so.epoch = 3;
    so.seed = 7;
    auto shard = c.sampler_shard(so);
    std::printf("shard=%zu:%016llx\n", shard.size(),
                static_cast<unsigned long long>(fnv(shard.data(), shard.size() * sizeof(int64_t))));
    std::fflush(stdout);
    c.barrier("done", std::chrono::seconds(30));
    if (hold) {
      try {
        c.get("never-set", std::chrono::seconds(60));
      } catch (const muster::Error& e) {
        std::printf("wait_error=%s %s\n", muster::error_name(e.code()), e.what());
        std::fflush(stdout);
        return 3;  // as a training program would: it cannot go on
      }
    }
  } catch (const muster::Error& e) {
    std::printf("error=%s message=%s\n", muster::error_name(e.code()), e.what());
    std::fflush(stdout);
    return 1;
  }
  return 0;
}
