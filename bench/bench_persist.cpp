// What a save costs beside a large store: one job holds 500 MB in its
// store, another sets 1-byte values, each acknowledged only once durable.
// Before the change log every save rewrote and fsynced the whole state
// (1.6 s a set at 480 MB); now a save appends what changed.
//
// Usage: bench_persist PATH/TO/musterd [sets]
// Two rows: the state directory on tmpfs (/dev/shm, as /run/muster is on a
// node), then on disk (/var/tmp), where fsync waits for the device:
//   set_beside_500MB[_disk]  muster_s: the median 1-byte set (p90 beside
//                     it); full_rewrite_s: writing and fsyncing 500 MB
//                     once in the same directory, the floor of the old way.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "muster/client.hpp"
#include "private_daemon.hpp"
#include "timing.hpp"

namespace {

using muster::bench::Clock;
using muster::bench::median;
using muster::bench::seconds;
constexpr size_t kBigBytes = 500'000'000;
constexpr size_t kValueBytes = 15'625'000;  // 32 values, under the 16 MiB value limit

double full_rewrite(const std::string& dir) {
  std::string path = dir + "/rewrite.bin";
  std::string block(1 << 20, 'x');
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return -1;
  for (size_t done = 0; done < kBigBytes; done += block.size())
    if (::write(fd, block.data(), block.size()) != static_cast<ssize_t>(block.size())) break;
  ::fsync(fd);
  ::close(fd);
  double s = seconds(Clock::now() - t0);
  ::unlink(path.c_str());
  return s;
}

// One row: the state directory under `base`.
int measure(const char* musterd, const std::string& base, const char* row, int sets) {
  std::string tmpl = base + "/muster-bench-state-XXXXXX";
  if (!mkdtemp(tmpl.data())) {
    std::perror("mkdtemp");
    return 1;
  }
  int rc = 0;
  try {
    // The 500 MB job is over the default store quota (256 MiB): raised.
    muster::bench::PrivateDaemon d(musterd, {"--state-dir", tmpl, "--max-store-bytes", "0"});
    muster::Client big({d.endpoint(), std::chrono::seconds(120)});
    big.join({"big", 1, false, -1});
    std::string value(kValueBytes, 'v');
    auto t0 = Clock::now();
    for (size_t i = 0; i < kBigBytes / kValueBytes; ++i) {
      value[0] = static_cast<char>('a' + i % 26);
      big.set("blob" + std::to_string(i), value);
    }
    double fill = seconds(Clock::now() - t0);
    muster::Client small({d.endpoint(), std::chrono::seconds(30)});
    small.join({"small", 1, false, -1});
    std::vector<double> t;
    for (int i = 0; i < sets; ++i) {
      auto s0 = Clock::now();
      small.set("x", std::string(1, static_cast<char>('a' + i % 26)));
      t.push_back(seconds(Clock::now() - s0));
    }
    std::sort(t.begin(), t.end());
    double p90 = t[t.size() * 9 / 10];
    std::printf(
        "bench %s muster_s=%.6f p90_s=%.6f full_rewrite_s=%.3f fill_500MB_s=%.2f "
        "sets=%d dir=%s\n",
        row, median(t), p90, full_rewrite(tmpl), fill, sets, base.c_str());
    std::fflush(stdout);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_persist: %s\n", e.what());
    rc = 1;
  }
  std::error_code ec;
  std::filesystem::remove_all(tmpl, ec);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s PATH/TO/musterd [sets]\n", argv[0]);
    return 2;
  }
  const int sets = argc > 2 ? std::max(10, std::atoi(argv[2])) : 200;
  int rc = 0;
  // tmpfs, as /run/muster (the service's state directory) is on a node;
  // then a disk, where fsync waits for the device.
  if (std::filesystem::is_directory("/dev/shm"))
    rc |= measure(argv[1], "/dev/shm", "set_beside_500MB", sets);
  rc |= measure(argv[1], "/var/tmp", "set_beside_500MB_disk", sets);
  return rc;
}
