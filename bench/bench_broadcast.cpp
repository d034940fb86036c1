// Benchmark of muster::broadcast: 256 MiB from rank 0 to 3 other ranks of
// one job through a private musterd, each rank a process of its own (as in
// the gloo anchor), against the floor of one warm 256 MiB memcpy. Prints:
//   bench broadcast_256MiB_4ranks muster_s=X       (median of 5 runs; the
//                                                   default path: the root's
//                                                   ring, streamed)
//   bench broadcast_256MiB_4ranks_whole muster_s=X (MUSTER_BCAST=whole: a
//                                                   stream through a pool of
//                                                   the broadcast's size)
//   bench broadcast_256MiB_4ranks_pool muster_s=X  (MUSTER_BCAST=pool: root's
//                                                   pool, written whole first)
//   bench broadcast_256MiB_4ranks_shm muster_s=X   (MUSTER_BCAST=shm: a fresh
//                                                   segment per call)
//   bench memcpy_256MiB floor_s=Y                  (median of 5 runs)
// Usage: bench_broadcast MUSTERD [default]   (the musterd binary, or
// $MUSTERD; with `default`, only the default path and the floor, for runs
// paired with the anchor's)
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "muster/broadcast.hpp"
#include "muster/client.hpp"
#include "private_daemon.hpp"
#include "timing.hpp"

namespace {

using muster::bench::Clock;
using muster::bench::median;
using muster::bench::seconds;
constexpr size_t kSize = size_t{256} << 20;
constexpr uint32_t kRanks = 4;
constexpr int kRuns = 5;

// What the rank processes share: a barrier (a futex word), the root's
// times, and each rank's error.
struct Shared {
  uint32_t arrived;
  uint32_t failed;
  double times[kRuns];
  char errors[kRanks][256];
};

long futex(uint32_t* word, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, word, op, val, ts, nullptr, 0);
}

// The n-th barrier of the run (n from 1): false when a rank failed.
bool arrive(Shared* s, uint32_t n) {
  const uint32_t target = n * kRanks;
  uint32_t v = __atomic_add_fetch(&s->arrived, 1u, __ATOMIC_SEQ_CST);
  if (v >= target) {
    futex(&s->arrived, FUTEX_WAKE, INT_MAX, nullptr);
    return true;
  }
  while ((v = __atomic_load_n(&s->arrived, __ATOMIC_SEQ_CST)) < target) {
    if (__atomic_load_n(&s->failed, __ATOMIC_SEQ_CST)) return false;
    timespec ts{0, 50 * 1000 * 1000};
    futex(&s->arrived, FUTEX_WAIT, v, &ts);
  }
  return true;
}

uint64_t word(size_t i) {
  return i * 0x9E3779B97F4A7C15ULL;
}

// One rank: join, take part in 1 + kRuns broadcasts (the first warms up),
// then check the bytes. Never returns.
[[noreturn]] void rank_main(const std::string& endpoint, const std::string& job, uint32_t r,
                            Shared* s) {
  try {
    std::vector<uint8_t> buf(kSize);  // touched: a model's parameters are resident
    if (r == 0)
      for (size_t i = 0; i < kSize; i += 8) {
        uint64_t v = word(i);
        std::memcpy(&buf[i], &v, 8);
      }
    muster::Client c({endpoint});
    c.join({job, kRanks, false, static_cast<int>(r)});
    uint32_t n = 0;
    for (int run = 0; run <= kRuns; ++run) {
      if (!arrive(s, ++n)) ::_exit(1);
      auto t0 = Clock::now();
      muster::broadcast(c, buf.data(), kSize, 0);
      if (!arrive(s, ++n)) ::_exit(1);
      if (r == 0 && run > 0) s->times[run - 1] = seconds(Clock::now() - t0);
    }
    for (size_t i = 0; i < kSize; i += 8) {
      uint64_t v;
      std::memcpy(&v, &buf[i], 8);
      if (v != word(i))
        throw std::runtime_error("its bytes differ from the root's at " + std::to_string(i));
    }
    ::_exit(0);
  } catch (const std::exception& e) {
    std::snprintf(s->errors[r], sizeof s->errors[r], "%s", e.what());
    __atomic_store_n(&s->failed, 1u, __ATOMIC_SEQ_CST);
    futex(&s->arrived, FUTEX_WAKE, INT_MAX, nullptr);
    ::_exit(1);
  }
}

double bench_broadcast(const muster::bench::PrivateDaemon& d, const std::string& job) {
  void* p =
      ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
  auto* s = new (p) Shared{};
  std::vector<pid_t> pids;
  std::fflush(nullptr);
  for (uint32_t r = 0; r < kRanks; ++r) {
    pid_t pid = ::fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) rank_main(d.endpoint(), job, r, s);
    pids.push_back(pid);
  }
  std::string err;
  for (uint32_t r = 0; r < kRanks; ++r) {
    int st = 0;
    ::waitpid(pids[r], &st, 0);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && err.empty())
      err = "rank " + std::to_string(r) + ": " +
            (s->errors[r][0] ? s->errors[r] : "exited with status " + std::to_string(st));
  }
  std::vector<double> times(s->times, s->times + kRuns);
  ::munmap(p, sizeof(Shared));
  if (!err.empty()) throw std::runtime_error(err);
  return median(times);
}

double bench_memcpy() {
  std::vector<uint8_t> a(kSize, 1), b(kSize, 2);
  std::vector<double> times;
  for (int run = 0; run <= kRuns; ++run) {
    auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), kSize);
    if (run > 0) times.push_back(seconds(Clock::now() - t0));
    a[run] = static_cast<uint8_t>(b[run + 1] + 1);  // keep the copies observable
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  const char* binary = argc > 1 ? argv[1] : std::getenv("MUSTERD");
  const bool all = argc <= 2;
  if (!binary || (argc > 2 && std::string(argv[2]) != "default") || argc > 3) {
    std::fprintf(stderr, "usage: %s MUSTERD [default] (path of the musterd binary)\n", argv[0]);
    return 2;
  }
  try {
    muster::bench::PrivateDaemon d(binary);
    double shm = 0, pool = 0, whole = 0;
    if (all) {
      ::setenv("MUSTER_BCAST", "shm", 1);
      shm = bench_broadcast(d, "bench-shm");
      ::setenv("MUSTER_BCAST", "pool", 1);
      pool = bench_broadcast(d, "bench-pool");
      ::setenv("MUSTER_BCAST", "whole", 1);
      whole = bench_broadcast(d, "bench-whole");
      ::unsetenv("MUSTER_BCAST");
    }
    double t = bench_broadcast(d, "bench");
    double floor = bench_memcpy();
    std::printf("bench broadcast_256MiB_4ranks muster_s=%.4f\n", t);
    if (all) {
      std::printf("bench broadcast_256MiB_4ranks_whole muster_s=%.4f\n", whole);
      std::printf("bench broadcast_256MiB_4ranks_pool muster_s=%.4f\n", pool);
      std::printf("bench broadcast_256MiB_4ranks_shm muster_s=%.4f\n", shm);
    }
    std::printf("bench memcpy_256MiB floor_s=%.4f\n", floor);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_broadcast: %s\n", e.what());
    return 1;
  }
  return 0;
}
