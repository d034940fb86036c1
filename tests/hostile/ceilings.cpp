// The global ceilings' parts that need no daemon (issue 43): their defaults
// from the machine (daemon/core/ceilings.hpp), and what a save costs in
// memory: a snapshot streams to its file in
// pieces, so the daemon's peak during one is the state plus a bounded
// buffer (a piece and the largest value), not the state two or three
// times over (one uid's 959 MiB of stores peaked at 3 GiB in a compaction).
// Measured in this process, whose peak resident size the kernel resets on
// request (/proc/self/clear_refs, "5").
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cluster/cluster.hpp"
#include "cluster/multi_node.hpp"
#include "core/ceilings.hpp"
#include "core/state.hpp"
#include "liveness/pidwatch.hpp"
#include "muster/error.hpp"
#include "persist/reply_cache.hpp"
#include "persist/state_codec.hpp"
#include "persist/state_file.hpp"
#include "protocol/limits.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace muster::daemon;

namespace {

// A field of /proc/self/status, in bytes (its kB).
uint64_t status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) << 10;
  return 0;
}

bool reset_peak() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

constexpr size_t kValue = size_t{16} << 20;
constexpr int kValues = 16;  // 256 MiB of store

}  // namespace

TEST_CASE("a snapshot of 256 MiB of stores costs its buffer, not the state again",
          "[hostile][ceilings]") {
  test::TempDir dir;
  PidWatch watch;
  ReplyCache replies;
  State st({}, watch);
  {
    CoordJob cj;
    cj.closed = true;
    cj.owner_uid = 1000;
    cj.store.id = "big~1000";
    cj.store.global = true;
    cj.store.global_world_size = 1;
    for (int i = 0; i < kValues; ++i)
      cj.store.kv.set("k" + std::to_string(i), std::string(kValue, static_cast<char>('a' + i)));
    st.cluster().restore_round("big~1000", std::move(cj));
  }
  StateFile f(dir.path());
  if (!reset_peak()) {
    WARN("this kernel does not reset the peak resident size: not measured");
    return;
  }
  const uint64_t before = status_bytes("VmRSS");
  const uint64_t peak_before = status_bytes("VmHWM");
  f.load(st, replies);  // an empty directory: the state as it is becomes the snapshot
  const uint64_t peak = status_bytes("VmHWM");
  WARN("resident before " << (before >> 20) << " MiB (peak reset to " << (peak_before >> 20)
                          << "), peak during the save " << (peak >> 20) << " MiB");
  REQUIRE(f.snapshot_bytes() > uint64_t{kValues} * kValue);
  // The buffer: a piece (state_codec::kSpillBytes) holding one value whole,
  // at most kMaxValueBytes; here 16 MiB values, and some slack for the
  // sorted index and the allocator. Before, the whole snapshot was built in
  // memory and copied once more: 512 MiB over.
  CHECK(peak - before <= kValue + state_codec::kSpillBytes + (size_t{16} << 20));

  // And what was streamed is the state: a fresh daemon loads it whole.
  State back({}, watch);
  StateFile again(dir.path());
  again.load(back, replies);
  REQUIRE(back.cluster().rounds().count("big~1000"));
  const auto& kv = back.cluster().rounds().at("big~1000").store.kv;
  CHECK(kv.size() == kValues);
  CHECK(kv.bytes() == st.cluster().rounds().at("big~1000").store.kv.bytes());
  const bool same = *kv.find("k7") == std::string(kValue, 'h');
  CHECK(same);
}

namespace {

void write_file(const std::string& path, const std::string& text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << text;
}

}  // namespace

TEST_CASE("the memory ceiling is half the cgroup's lowest memory.max, else MemAvailable / 4") {
  test::TempDir root;
  const std::string r = root.path();
  write_file(r + "/proc/meminfo", "MemTotal: 32000000 kB\nMemAvailable: 8388608 kB\n");
  std::string how;
  // No cgroup limit: a quarter of MemAvailable (8 GiB).
  write_file(r + "/proc/self/cgroup", "0::/system.slice/musterd.service\n");
  write_file(r + "/sys/fs/cgroup/system.slice/musterd.service/memory.max", "max\n");
  CHECK(default_memory_ceiling(r, &how) == uint64_t{2} << 30);
  CHECK(how.find("MemAvailable") != std::string::npos);
  // MemoryMax=1G on the unit: half of it. A parent's lower limit wins.
  write_file(r + "/sys/fs/cgroup/system.slice/musterd.service/memory.max", "1073741824\n");
  CHECK(default_memory_ceiling(r, &how) == uint64_t{512} << 20);
  CHECK(how.find("/system.slice/musterd.service") != std::string::npos);
  write_file(r + "/sys/fs/cgroup/system.slice/memory.max", "268435456\n");
  CHECK(default_memory_ceiling(r, &how) == uint64_t{128} << 20);
  CHECK(how.find("cgroup /system.slice ") != std::string::npos);
  // Never below 64 MiB.
  write_file(r + "/sys/fs/cgroup/system.slice/memory.max", "1048576\n");
  CHECK(default_memory_ceiling(r, &how) == uint64_t{64} << 20);
}

TEST_CASE("ceilings are given as auto, none or a size") {
  bool is_auto = false;
  CHECK(parse_ceiling("auto", "max-memory", &is_auto) == 0);
  CHECK(is_auto);
  CHECK(parse_ceiling("none", "max-memory", &is_auto) == 0);
  CHECK_FALSE(is_auto);
  CHECK(parse_ceiling("4G", "max-memory", &is_auto) == uint64_t{4} << 30);
  CHECK(parse_ceiling("123", "max-memory", &is_auto) == 123);
  for (const char* bad : {"", "4g", "-1", "1.5G", "G", "99999999999999999999"})
    CHECK_THROWS_AS(parse_ceiling(bad, "max-memory", &is_auto), std::invalid_argument);
}

TEST_CASE("a user's share is half of a ceiling alone, 1/N with N active; root has none") {
  auto refused = [](uint64_t memory, Holdings h, int64_t uid, uint64_t growth) {
    try {
      check_ceilings(memory, 0, h, uid, growth, 0);
      return std::string();
    } catch (const Error& e) {
      CHECK(e.code() == ErrorCode::kQuotaExceeded);
      return std::string(e.what());
    }
  };
  const uint64_t c = 600;
  CHECK(refused(c, {0, 0, 0, 0, 1}, 1000, 300).empty());
  CHECK(refused(c, {0, 0, 0, 0, 1}, 1000, 301).find("its share") != std::string::npos);
  CHECK(refused(c, {300, 100, 0, 0, 3}, 1000, 100).empty());
  CHECK_FALSE(refused(c, {300, 100, 0, 0, 3}, 1000, 101).empty());
  // Root: the ceiling alone.
  CHECK(refused(c, {100, 100, 0, 0, 3}, 0, 500).empty());
  CHECK(refused(c, {100, 100, 0, 0, 3}, 0, 501).find("for all its users") != std::string::npos);
  // The ceiling before the share; none = 0 checks nothing.
  CHECK(refused(c, {590, 0, 0, 0, 4}, 1000, 20).find("for all its users") != std::string::npos);
  CHECK(refused(0, {590, 0, 0, 0, 4}, 1000, uint64_t{1} << 40).empty());
}
