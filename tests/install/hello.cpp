// Built against an installed libmuster (muster.pc) by install_test.sh and run
// as a 2-rank job: join, add to a counter, meet at a barrier; a muster::Error
// thrown inside the library is caught here by type.
#include <muster/client.hpp>

#include <cstdio>

int main() {
  try {
    muster::Client client;
    auto me = client.join_from_env();
    client.add("count", 1);
    client.barrier("cpp");
    if (client.add("count", 0) != me.world_size) return 1;
    try {
      client.get("never", std::chrono::milliseconds(50));
      return 1;
    } catch (const muster::Error& e) {
      if (e.code() != muster::ErrorCode::kTimeout) return 1;
    }
    client.barrier("cpp-done");
    std::printf("hello.cpp: rank %u of %u ok\n", me.rank, me.world_size);
  } catch (const muster::Error& e) {
    std::fprintf(stderr, "hello.cpp: %s\n", e.what());
    return 1;
  }
  return 0;
}
