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
// Broadcasts across nodes (the root's bytes are pattern(SIZE, root + 1),
// every other rank starts with 0xEE bytes; digest() of what a rank ends
// with is printed):
//   bcast SIZE ROOT...   one broadcast per root: `bcast_<root>=<digest>`,
//                        then an empty one (`bcast_empty=ok`), then
//                        sync_model of three buffers (SIZE / 4 float32s,
//                        1001 bytes, 777 float64s) from rank 0:
//                        `sync=<digest of the three>`, and with
//                        reduce_parameters: `sync_reduce=<error code>`;
//                        last `relayed=<muster/bcast/relayed>` and
//                        `shared=<muster/bcast/shared>`
//   bcast-loop SIZE ROOT [COUNT [sync]]  (ignores SIGTERM) prints `pid=<pid>`, then
//                        broadcasts until one fails, or COUNT times (1000):
//                        `bcast_start n=N`, `bcast=<digest> n=N ms=<time>`
//                        per call; with `sync`, every rank passes a barrier
//                        just before each call (for benchmarks: the time
//                        starts when every rank's does, not while a rank
//                        waits for slower ones) and one just after, within
//                        the time (as in the gloo anchor: it ends when every
//                        rank's call has), so no rank's digest overlaps a call
//   bcast-mismatch SIZE ROOT RANK...  the listed ranks pass SIZE + 8 bytes:
//                        `bcast=<digest>` or `bcast_error=<code> <message>`
//                        (without exiting), then a broadcast with the right
//                        size on every rank: `bcast_after=<digest>`
// A failed broadcast prints `bcast_error=<code> <message>` and exits 3.
// coord-restart DIR SIZE: the steps of tests/test_coord_restart.cpp (see
//   coord_restart below).
// linger MS: after the last barrier, MS milliseconds more (heartbeats go
//   on meanwhile), then a barrier `lingered` and a clean exit.
// regets N: N more gets of the NCCL id of "world" (as a late rank's would
//   be), each compared with the first: `regets=ok` or `regets=WRONG`.
// store-api: torch's newer Store API across nodes (append, multi_set/get,
//   num_keys, list_keys, queues, a queue_pop parked before the push on
//   another node): `api=ok`, or `api=WRONG <what>`.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "muster/broadcast.hpp"
#include "muster/client.hpp"
#include "support/bytes.hpp"

using muster::test::digest;
using muster::test::fnv;
using muster::test::hex64;
using muster::test::pattern;

namespace {

int bcast_failed(const muster::Error& e) {
  std::printf("bcast_error=%s %s\n", muster::error_name(e.code()), e.what());
  std::fflush(stdout);
  // A moment before exiting: muster run stops the node's other ranks once
  // one exits, and the test wants to hear what each rank's call said.
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  return 3;
}

// `bcast SIZE ROOT...`
int broadcasts(muster::Client& c, size_t size, const std::vector<uint32_t>& roots) {
  const auto& r = c.rank_info();
  std::vector<uint8_t> buf(size);
  try {
    for (uint32_t root : roots) {
      if (r.rank == root)
        pattern(buf.data(), size, root + 1);
      else
        std::memset(buf.data(), 0xEE, size);
      auto t0 = std::chrono::steady_clock::now();
      muster::broadcast(c, buf.data(), size, root);
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf("bcast_%u=%s ms=%.1f\n", root, hex64(digest(buf.data(), size)).c_str(), ms);
      std::fflush(stdout);
    }
    muster::broadcast(c, nullptr, 0, roots.empty() ? 0 : roots.back());
    std::printf("bcast_empty=ok\n");
    // sync_model: rank 0's three buffers, packed with padding between them.
    std::vector<float> f(size / 4);
    std::vector<uint8_t> b(1001);
    std::vector<double> d(777);
    if (r.rank == 0) {
      pattern(reinterpret_cast<uint8_t*>(f.data()), f.size() * 4, 101);
      pattern(b.data(), b.size(), 102);
      pattern(reinterpret_cast<uint8_t*>(d.data()), d.size() * 8, 103);
    } else {
      std::memset(f.data(), 0xEE, f.size() * 4);
      std::memset(b.data(), 0xEE, b.size());
      std::memset(d.data(), 0xEE, d.size() * 8);
    }
    using T = muster::Buffer::Type;
    std::vector<muster::Buffer> bufs = {{f.data(), f.size() * 4, T::kFloat32, true},
                                        {b.data(), b.size(), T::kBytes, false},
                                        {d.data(), d.size() * 8, T::kFloat64, false}};
    muster::sync_model(c, bufs);
    uint64_t h = digest(reinterpret_cast<uint8_t*>(f.data()), f.size() * 4);
    h = digest(b.data(), b.size(), h);
    h = digest(reinterpret_cast<uint8_t*>(d.data()), d.size() * 8, h);
    std::printf("sync=%s\n", hex64(h).c_str());
    try {
      muster::sync_model(c, bufs, true);
      std::printf("sync_reduce=ok\n");
    } catch (const muster::Error& e) {
      std::printf("sync_reduce=%s\n", muster::error_name(e.code()));
    }
    c.barrier("bcast-done", std::chrono::seconds(60));
    std::printf("relayed=%s\n", c.try_get("muster/bcast/relayed").value_or("none").c_str());
    std::printf("shared=%s\n", c.try_get("muster/bcast/shared").value_or("none").c_str());
    std::fflush(stdout);
  } catch (const muster::Error& e) {
    return bcast_failed(e);
  }
  return 0;
}

// `bcast-loop SIZE ROOT`
int broadcast_loop(muster::Client& c, size_t size, uint32_t root, int count, bool sync) {
  const auto& r = c.rank_info();
  std::vector<uint8_t> buf(size);
  std::printf("pid=%d\n", static_cast<int>(::getpid()));
  try {
    for (int n = 0; n < count; ++n) {
      if (r.rank == root)
        pattern(buf.data(), size, root + 1);
      else
        std::memset(buf.data(), 0xEE, size);
      std::printf("bcast_start n=%d\n", n);
      std::fflush(stdout);
      if (sync) c.barrier("bcast-loop-" + std::to_string(n));
      auto t0 = std::chrono::steady_clock::now();
      muster::broadcast(c, buf.data(), size, root);
      // With sync, the time ends after a barrier of all ranks, as the gloo
      // anchor's does, so no rank's digest below takes the CPU from a call
      // still going on another.
      if (sync) c.barrier("bcast-loop-done-" + std::to_string(n));
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      std::printf("bcast=%s n=%d ms=%.1f\n", hex64(digest(buf.data(), size)).c_str(), n, ms);
      std::fflush(stdout);
    }
  } catch (const muster::Error& e) {
    return bcast_failed(e);
  }
  return 0;
}
// `bcast-mismatch SIZE ROOT RANK...`
int broadcast_mismatch(muster::Client& c, size_t size, uint32_t root,
                       const std::vector<uint32_t>& wrong) {
  const auto& r = c.rank_info();
  bool mine = std::find(wrong.begin(), wrong.end(), r.rank) != wrong.end();
  std::vector<uint8_t> buf(size + 8);
  if (r.rank == root)
    pattern(buf.data(), size, root + 1);
  else
    std::memset(buf.data(), 0xEE, buf.size());
  try {
    muster::broadcast(c, buf.data(), mine ? size + 8 : size, root);
    std::printf("bcast=%s\n", hex64(digest(buf.data(), size)).c_str());
  } catch (const muster::Error& e) {
    std::printf("bcast_error=%s %s\n", muster::error_name(e.code()), e.what());
  }
  std::fflush(stdout);
  try {
    if (r.rank != root) std::memset(buf.data(), 0xEE, buf.size());
    muster::broadcast(c, buf.data(), size, root);
    std::printf("bcast_after=%s\n", hex64(digest(buf.data(), size)).c_str());
    std::fflush(stdout);
  } catch (const muster::Error& e) {
    return bcast_failed(e);
  }
  return 0;
}
}  // namespace

// `coord-restart DIR SIZE`: steps the test kills the coordinating daemon in
// (tests/test_coord_restart.cpp). Every rank prints `at=<step>` when it
// reaches one; the last rank goes on only once the test created DIR/<step>,
// so that the others wait meanwhile (in the barrier, in the key wait):
//   an add before anything (`count=` at the end: applied once each),
//   barrier, `barrier=ok`; key: the others wait for the last rank's set,
//   `key=<value>`; then 4 broadcasts of SIZE bytes from the last rank,
//   `bcast=ok n=N` each (the bytes checked against the root's), the test
//   killing the daemon during the last three; `restarted=<broadcasts the
//   coordinator had to start again>`, `count=<value>` last.
int coord_restart(muster::Client& c, const muster::RankInfo& r, const std::string& dir,
                  size_t size) {
  using std::chrono::seconds;
  auto say = [](const std::string& s) {
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  };
  const uint32_t last = r.world_size - 1;
  auto go = [&](const char* step) {
    say(std::string("at=") + step);
    if (r.rank != last) return;
    for (int i = 0; i < 6000 && ::access((dir + "/" + step).c_str(), F_OK) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  };
  c.add("restart/count", 1);
  go("barrier");
  c.barrier("restart-barrier", seconds(120));
  say("barrier=ok");
  go("key");
  if (r.rank == last) c.set("restart/key", "value-" + std::to_string(r.world_size));
  say("key=" + c.get("restart/key", seconds(120)));
  std::vector<uint8_t> want(size), buf(size);
  pattern(want.data(), size, last + 1);
  for (int n = 0; n < 4; ++n) {
    if (r.rank == last)
      buf = want;
    else
      std::memset(buf.data(), 0xEE, size);
    say("at=bcast n=" + std::to_string(n));
    muster::broadcast(c, buf.data(), size, last);
    say(std::string("bcast=") + (buf == want ? "ok" : "WRONG") + " n=" + std::to_string(n));
  }
  c.barrier("restart-end", seconds(120));
  say("restarted=" + c.try_get("muster/bcast/restarted").value_or("0"));
  say("count=" + c.get("restart/count"));
  return 0;
}

// Every rank writes through the newer Store API, then checks what all
// wrote; the last rank waits in queue_pop for an item rank 0 pushes later.
int store_api(muster::Client& c, const muster::RankInfo& r) {
  using std::chrono::seconds;
  const std::string me = std::to_string(r.rank);
  const uint32_t n = r.world_size;
  c.append("api/log", me + ",");
  c.queue_push("api/q", me);
  c.multi_set({"api/m/" + me + "/a", "api/m/" + me + "/b"}, {me + "a", me + "b"});
  c.barrier("api-written", seconds(30));
  std::string wrong;
  const std::string next = std::to_string((r.rank + 1) % n);
  auto got = c.multi_get({"api/m/" + next + "/a", "api/m/" + next + "/b"}, seconds(5));
  if (got != std::vector<std::string>{next + "a", next + "b"}) wrong += " multi_get";
  if (c.num_keys("api/m/") != 2 * static_cast<int64_t>(n)) wrong += " num_keys";
  if (c.list_keys("api/m/").size() != 2 * n) wrong += " list_keys";
  if (c.queue_len("api/q") != n) wrong += " queue_len";
  std::string log = c.get("api/log");
  if (std::count(log.begin(), log.end(), ',') != static_cast<long>(n)) wrong += " append";
  c.barrier("api-read", seconds(30));
  if (r.rank == 0) {
    std::vector<std::string> items;
    for (uint32_t k = 0; k < n; ++k) items.push_back(c.queue_pop("api/q", seconds(5)));
    std::sort(items.begin(), items.end());
    std::vector<std::string> want;
    for (uint32_t k = 0; k < n; ++k) want.push_back(std::to_string(k));
    std::sort(want.begin(), want.end());
    if (items != want || c.queue_len("api/q") != 0) wrong += " queue_pop";
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    c.queue_push("api/late", "from0");
  } else if (r.rank == n - 1) {
    if (c.queue_pop("api/late", seconds(30)) != "from0") wrong += " parked_pop";
  }
  c.barrier("api-done", seconds(30));
  std::printf("api=%s%s\n", wrong.empty() ? "ok" : "WRONG", wrong.c_str());
  std::fflush(stdout);
  return wrong.empty() ? 0 : 3;
}

int main(int argc, char** argv) {
  std::string mode = argc > 1 ? argv[1] : "";
  bool hold = mode == "hold" || mode == "hold-nosigterm";
  // These ranks must report how their wait or broadcast ended even when
  // muster run stops the group at the same moment (it kills after the
  // grace period).
  if (mode == "hold-nosigterm" || mode == "bcast-loop") std::signal(SIGTERM, SIG_IGN);
  try {
    muster::Client c;
    auto r = c.join_from_env();
    std::printf("rank=%u local_rank=%u world=%u node=%u nodes=%u generation=%llu\n", r.rank,
                r.local_rank, r.world_size, r.node_rank, r.num_nodes,
                static_cast<unsigned long long>(r.generation));
    auto id = muster::nccl_unique_id(c, "world", std::chrono::seconds(30));
    auto ids = muster::nccl_unique_ids(c, 2, "scalable", std::chrono::seconds(30));
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
    if (mode == "bcast" && argc > 2) {
      std::vector<uint32_t> roots;
      for (int i = 3; i < argc; ++i) roots.push_back(static_cast<uint32_t>(std::stoul(argv[i])));
      return broadcasts(c, std::stoull(argv[2]), roots);
    }
    if (mode == "bcast-mismatch" && argc > 4) {
      std::vector<uint32_t> wrong;
      for (int i = 4; i < argc; ++i) wrong.push_back(static_cast<uint32_t>(std::stoul(argv[i])));
      return broadcast_mismatch(c, std::stoull(argv[2]), static_cast<uint32_t>(std::stoul(argv[3])),
                                wrong);
    }
    if (mode == "bcast-loop" && argc > 3)
      return broadcast_loop(c, std::stoull(argv[2]), static_cast<uint32_t>(std::stoul(argv[3])),
                            argc > 4 ? std::stoi(argv[4]) : 1000,
                            argc > 5 && std::string(argv[5]) == "sync");
    if (mode == "store-api") return store_api(c, r);
    if (mode == "linger" && argc > 2) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::stoll(argv[2])));
      c.barrier("lingered", std::chrono::seconds(30));
      std::printf("lingered=ok\n");
      return 0;
    }
    if (mode == "regets" && argc > 2) {
      // A late rank's gets of an NCCL id its node already fetched.
      const std::string key = "muster.nccl/" + std::to_string(r.generation) + "/world/1/0";
      bool same = true;
      for (int i = std::stoi(argv[2]); i > 0; --i) same = same && c.get(key) == id;
      std::printf("regets=%s\n", same ? "ok" : "WRONG");
      std::fflush(stdout);
      c.barrier("regot", std::chrono::seconds(30));
    }
    if (mode == "coord-restart" && argc > 3)
      return coord_restart(c, r, argv[2], std::stoull(argv[3]));
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
