// A distributed "hello" on libmuster: every rank joins its job, publishes a
// value through the job's store, passes a barrier and checks what the other
// ranks published. As the seed advises, only the local master logs and only
// the master writes a file.
//
//   muster run -n 4 build/examples/cpp/hello_muster [--out FILE]
#include <muster/client.hpp>

#include <unistd.h>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>

int main(int argc, char** argv) {
  std::string out_path = "hello_muster_result.txt";
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--out") == 0 && i + 1 < argc) out_path = argv[++i];
    // --local_rank=N (torch.distributed.launch style) is accepted; the daemon
    // already knows our local rank from the environment.
  }
  try {
    muster::Client client;
    const auto me = client.join_from_env();
    std::printf("rank %u/%u (local %u/%u, node %u/%u) pid %d gpu %s: master=%s local_master=%s\n",
                me.rank, me.world_size, me.local_rank, me.local_world_size, me.node_rank,
                me.num_nodes, static_cast<int>(getpid()),
                me.device >= 0 ? std::to_string(me.device).c_str() : "none",
                client.is_master() ? "yes" : "no", client.is_local_master() ? "yes" : "no");
    std::fflush(stdout);

    // Each rank contributes rank*rank + 1; everyone checks the total.
    client.set("value/" + std::to_string(me.rank), std::to_string(me.rank * me.rank + 1));
    client.add("arrived", 1);
    client.barrier("values-published");
    long long total = 0, expected = 0;
    for (uint32_t r = 0; r < me.world_size; ++r) {
      total += std::stoll(client.get("value/" + std::to_string(r)));
      expected += static_cast<long long>(r) * r + 1;
    }
    auto arrived = client.add("arrived", 0);
    if (total != expected || arrived != me.world_size) {
      std::fprintf(stderr, "rank %u: got total %lld (expected %lld), %lld arrivals\n", me.rank,
                   total, expected, static_cast<long long>(arrived));
      return 1;
    }
    if (client.is_local_master())
      std::printf("local master: %u ranks agreed on the total %lld through musterd\n",
                  me.world_size, total);
    if (client.is_master()) {
      std::ofstream f(out_path);
      f << "job " << me.job << " world_size " << me.world_size << " total " << total << "\n";
      if (!f) {
        std::fprintf(stderr, "master: cannot write %s\n", out_path.c_str());
        return 1;
      }
      std::printf("master: wrote %s\n", out_path.c_str());
    }
    // Nobody leaves before the master has written its file.
    client.barrier("done");
  } catch (const muster::Error& e) {
    std::fprintf(stderr, "hello_muster: %s (%s)\n", e.what(), muster::error_name(e.code()));
    return 1;
  }
  return 0;
}
