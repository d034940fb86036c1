// Model broadcast and sync_model through shared memory: several ranks of one
// job as threads of this process (each with its own Client and local rank),
// against a private musterd.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string_view>
#include <thread>

#include "muster/broadcast.hpp"
#include "muster/client.hpp"
#include "muster/muster.h"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::Process;
using test::TestDaemon;

namespace {

// Waits and barriers give up well before the test's own timeout.
ClientOptions at(const TestDaemon& d) {
  return ClientOptions{d.endpoint(), 10s, 30s};
}

std::string job_id(const std::string& tag) {
  return "bc" + std::to_string(::getpid()) + "-" + tag;
}

// The job's shared memory segments still in /dev/shm.
std::vector<std::string> segments_of(const std::string& job) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm"))
    if (e.path().filename().string().rfind("muster." + job + ".", 0) == 0)
      out.push_back(e.path().filename().string());
  return out;
}

// Roots' pools (memfds) of the job held by this process, as /proc/self/fd
// links.
std::vector<std::string> pools_of(const std::string& job) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto link = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && link.rfind("/memfd:muster.pool." + job + ".", 0) == 0) out.push_back(link);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());  // readers' descriptors too
  return out;
}

// Whether every root's pool of the job held by this process is sealed
// against shrinking, as a daemon that maps it needs (daemon/cluster/
// pool_files.hpp).
bool pools_sealed(const std::string& job) {
  size_t seen = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto link = std::filesystem::read_symlink(e.path(), ec).string();
    if (ec || link.rfind("/memfd:muster.pool." + job + ".", 0) != 0) continue;
    int fd = ::open(e.path().c_str(), O_RDONLY | O_CLOEXEC);
    const int seals = fd >= 0 ? ::fcntl(fd, F_GET_SEALS) : -1;
    if (fd >= 0) ::close(fd);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) return false;
    ++seen;
  }
  return seen > 0;
}

// Sets an environment variable for one test (before its threads start).
struct Env {
  std::string name;
  Env(const char* n, const char* v) : name(n) { ::setenv(n, v, 1); }
  ~Env() { ::unsetenv(name.c_str()); }
};

struct Outcome {
  bool ok = false;
  ErrorCode code = ErrorCode::kOk;
  std::string what;
};

// Runs body(client, rank) for each of `ranks` on its own thread and client,
// joined to `job` with that local rank. No Catch2 macros in the threads.
std::vector<Outcome> on_ranks(const TestDaemon& d, const std::string& job, uint32_t world,
                              const std::vector<uint32_t>& ranks,
                              const std::function<void(Client&, uint32_t)>& body) {
  std::vector<Outcome> out(ranks.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < ranks.size(); ++k)
    threads.emplace_back([&, k] {
      try {
        Client c(at(d));
        c.join({job, world, false, static_cast<int>(ranks[k])});
        body(c, ranks[k]);
        out[k].ok = true;
      } catch (const Error& e) {
        out[k].code = e.code();
        out[k].what = e.what();
      } catch (const std::exception& e) {
        out[k].code = ErrorCode::kInternal;
        out[k].what = std::string("unexpected: ") + e.what();
      }
    });
  for (auto& t : threads) t.join();
  return out;
}

std::vector<uint32_t> all(uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

std::vector<uint8_t> pattern(size_t size, uint32_t seed) {
  std::vector<uint8_t> v(size);
  uint64_t x = 0x9E3779B97F4A7C15ULL * (seed + 1);
  for (size_t i = 0; i < size; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v[i] = static_cast<uint8_t>(x);
  }
  return v;
}

// A separate process holding one rank (so that it can die); it may enter a
// barrier, then sleeps until killed.
struct ChildRank {
  std::unique_ptr<Process> proc;
  std::string line;
  ChildRank(const TestDaemon& d, const std::string& job, int world, int rank,
            const std::string& barrier = "") {
    std::vector<std::string> argv = {test::program("MUSTER_TEST_RANK"), job, std::to_string(world),
                                     std::to_string(rank), "cpu"};
    if (!barrier.empty()) argv.insert(argv.end(), {"barrier", barrier});
    proc = std::make_unique<Process>(
        argv, std::map<std::string, std::string>{{"MUSTER_ENDPOINT", d.endpoint()}});
    line = proc->read_line(10s).value_or("");
  }
};

}  // namespace

TEST_CASE("broadcast gives every rank root's bytes, for roots 0 and 2 and sizes 0 to 64 MiB") {
  TestDaemon d;
  const std::string job = job_id("sizes");
  const std::vector<size_t> sizes = {0, 1, (size_t{4} << 20) + 3, size_t{64} << 20};
  std::vector<std::vector<std::vector<uint8_t>>> got(4);  // [rank][call]
  auto out = on_ranks(d, job, 4, all(4), [&](Client& c, uint32_t r) {
    for (uint32_t root : {0u, 2u})
      for (size_t size : sizes) {
        auto buf = pattern(size, r == root ? 1000 + root : r);  // the others differ
        muster::broadcast(c, buf.data(), buf.size(), root);
        got[r].push_back(std::move(buf));
      }
  });
  for (const auto& o : out) REQUIRE(o.what == "");
  size_t call = 0;
  for (uint32_t root : {0u, 2u})
    for (size_t size : sizes) {
      auto want = pattern(size, 1000 + root);
      for (uint32_t r = 0; r < 4; ++r) {
        INFO("root " << root << " size " << size << " rank " << r);
        REQUIRE(got[r][call].size() == size);
        CHECK(got[r][call] == want);
      }
      ++call;
    }
  CHECK(segments_of(job).empty());
}

TEST_CASE("the bytes travel through one shared memory segment, gone when broadcast returns") {
  Env path("MUSTER_BCAST", "shm");
  TestDaemon d;
  const std::string job = job_id("shm");
  const size_t size = size_t{128} << 20;
  std::vector<std::string> seen;
  std::atomic<bool> stop{false};
  std::thread watcher([&] {
    while (!stop) {
      for (auto& s : segments_of(job))
        if (std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
      std::this_thread::sleep_for(1ms);
    }
  });
  auto out = on_ranks(d, job, 3, all(3), [&](Client& c, uint32_t r) {
    auto buf = pattern(size, r);
    muster::broadcast(c, buf.data(), buf.size(), 1);
    if (buf != pattern(size, 1)) throw std::runtime_error("wrong bytes");
  });
  stop = true;
  watcher.join();
  for (const auto& o : out) REQUIRE(o.what == "");
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].find(".r1.") != std::string::npos);  // made by the root
  CHECK(segments_of(job).empty());
}

TEST_CASE("sync_model by default gives every rank rank 0's buffers") {
  TestDaemon d;
  const std::string job = job_id("sync");
  struct Model {
    std::vector<float> w;
    std::vector<double> b;
    std::vector<uint8_t> state;
  };
  auto make = [](uint32_t r) {
    Model m;
    for (int i = 0; i < 1000; ++i) m.w.push_back(static_cast<float>(r * 10 + i) * 0.5f);
    for (int i = 0; i < 33; ++i) m.b.push_back(r * 100.0 + i / 3.0);
    m.state = pattern(777, r);
    return m;
  };
  std::vector<Model> models(4);
  auto out = on_ranks(d, job, 4, all(4), [&](Client& c, uint32_t r) {
    auto& m = models[r] = make(r);
    using T = muster::Buffer::Type;
    muster::sync_model(c, {{m.w.data(), m.w.size() * 4, T::kFloat32, true},
                           {m.b.data(), m.b.size() * 8, T::kFloat64, true},
                           {m.state.data(), m.state.size(), T::kBytes, false},
                           {nullptr, 0, T::kFloat32, false}});
  });
  for (const auto& o : out) REQUIRE(o.what == "");
  auto want = make(0);
  for (uint32_t r = 0; r < 4; ++r) {
    INFO("rank " << r);
    CHECK(models[r].w == want.w);
    CHECK(models[r].b == want.b);
    CHECK(models[r].state == want.state);
  }
  CHECK(segments_of(job).empty());
}

// A model past the ring's 16 MiB: buffers that straddle its 1 MiB chunks,
// alignment gaps between them, an empty one; rank r's values differ.
struct BigModel {
  std::vector<uint8_t> w, tiny, mid, tail;
  std::vector<muster::Buffer> buffers() {
    using T = muster::Buffer::Type;
    return {{w.data(), w.size(), T::kFloat32, true},
            {tiny.data(), tiny.size(), T::kBytes, false},
            {nullptr, 0, T::kFloat32, true},
            {mid.data(), mid.size(), T::kBytes, false},
            {tail.data(), tail.size(), T::kFloat64, false}};
  }
  static BigModel make(uint32_t r) {
    return {pattern((size_t{3} << 20) + 20, r), pattern(17, r + 10),
            pattern((size_t{5} << 20) + 3, r + 20), pattern(size_t{9} << 20, r + 30)};
  }
  bool operator==(const BigModel& o) const {
    return w == o.w && tiny == o.tiny && mid == o.mid && tail == o.tail;
  }
};

TEST_CASE("sync_model of a large model streams through rank 0's ring, on every path") {
  TestDaemon d;
  const char* paths[] = {"", "whole", "stream", "pool", "shm"};
  for (const char* path : paths) {
    INFO("MUSTER_BCAST=" << path);
    Env env("MUSTER_BCAST", path);
    const std::string job = job_id(std::string("bigsync") + path);
    std::vector<BigModel> models(4);
    std::vector<std::string> pools;
    auto out = on_ranks(d, job, 4, all(4), [&](Client& c, uint32_t r) {
      models[r] = BigModel::make(r);
      for (int call = 0; call < 2; ++call) {  // the second call reuses rank 0's pool
        if (call) models[r] = BigModel::make(r + 4 * (r != 0));
        muster::sync_model(c, models[r].buffers());
        if (r == 0) pools = pools_of(job);
      }
    });
    for (const auto& o : out) REQUIRE(o.what == "");
    for (uint32_t r = 1; r < 4; ++r) {
      INFO("rank " << r);
      CHECK((models[r] == BigModel::make(0)));
    }
    // The stream and the ring run in rank 0's pool (a memfd); a pool written
    // whole takes only one buffer, so sync_model's several take a segment.
    const bool pooled = std::string_view(path) != "shm" && std::string_view(path) != "pool";
    CHECK(pools.size() == (pooled ? 1u : 0u));
    CHECK(segments_of(job).empty());
  }
}

TEST_CASE("sync_model with other buffers than rank 0's fails on that rank, past the ring") {
  TestDaemon d;
  const std::string job = job_id("bigsyncsize");
  std::vector<BigModel> models(3);
  auto t0 = std::chrono::steady_clock::now();
  auto out = on_ranks(d, job, 3, all(3), [&](Client& c, uint32_t r) {
    models[r] = BigModel::make(r);
    if (r == 1) models[r].mid.resize(models[r].mid.size() + 8);
    muster::sync_model(c, models[r].buffers());
  });
  CHECK(out[0].ok);
  CHECK(out[1].code == ErrorCode::kInvalidArgument);
  CHECK_THAT(out[1].what, Catch::Contains("other buffers"));
  CHECK(out[2].ok);
  CHECK((models[2] == BigModel::make(0)));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
}

TEST_CASE("sync_model averages float32 and float64 parameters or buffers, bit-identically") {
  TestDaemon d;
  const uint32_t n = 4;
  const size_t count = 40000;  // several copy blocks
  auto p32 = [](uint32_t r, size_t i) { return static_cast<float>(r) * 0.1f + i * 1e-3f; };
  auto p64 = [](uint32_t r, size_t i) { return r * 1.0 / 3.0 + static_cast<double>(i); };
  auto b32 = [](uint32_t r, size_t i) { return static_cast<float>(r * 1000 + i) / 7.0f; };
  for (bool params : {true, false}) {
    DYNAMIC_SECTION((params ? "reduce_parameters" : "reduce_buffers")) {
      const std::string job = job_id(params ? "avgp" : "avgb");
      std::vector<std::vector<float>> w(n), bn(n);
      std::vector<std::vector<double>> v(n);
      auto out = on_ranks(d, job, n, all(n), [&](Client& c, uint32_t r) {
        for (size_t i = 0; i < count; ++i) {
          w[r].push_back(p32(r, i));
          v[r].push_back(p64(r, i));
          bn[r].push_back(b32(r, i));
        }
        using T = muster::Buffer::Type;
        muster::sync_model(c,
                           {{w[r].data(), count * 4, T::kFloat32, true},
                            {bn[r].data(), count * 4, T::kFloat32, false},
                            {v[r].data(), count * 8, T::kFloat64, true}},
                           params, !params);
      });
      for (const auto& o : out) REQUIRE(o.what == "");
      size_t wrong = 0;
      for (size_t i = 0; i < count; ++i) {
        double s32 = 0, s64 = 0, sb = 0;
        for (uint32_t r = 0; r < n; ++r) s32 += p32(r, i), s64 += p64(r, i), sb += b32(r, i);
        // Averaged, or rank 0's when not reduced.
        float want_w = params ? static_cast<float>(s32 / n) : p32(0, i);
        double want_v = params ? s64 / n : p64(0, i);
        float want_b = params ? b32(0, i) : static_cast<float>(sb / n);
        for (uint32_t r = 0; r < n; ++r)
          if (w[r][i] != want_w || v[r][i] != want_v || bn[r][i] != want_b) {
            if (++wrong < 5) {
              INFO("rank " << r << " element " << i);
              CHECK(w[r][i] == want_w);
              CHECK(v[r][i] == want_v);
              CHECK(bn[r][i] == want_b);
            }
          }
      }
      CHECK(wrong == 0);
      CHECK(w[1][5] != p32(1, 5));
      CHECK(segments_of(job).empty());
    }
  }
}

namespace {

// Ranks 0, 1 and 2 of job (of 4) broadcast 64 MiB from rank 0 while rank 3,
// a process of its own, dies: each must fail with peer_exited. How each
// ended.
std::vector<Outcome> broadcast_losing_rank3(const TestDaemon& d, const std::string& job) {
  auto out = on_ranks(d, job, 4, {0, 1, 2}, [&](Client& c, uint32_t r) {
    auto buf = pattern(size_t{64} << 20, r);
    muster::broadcast(c, buf.data(), buf.size(), 0);
  });
  for (const auto& o : out) {
    CHECK_FALSE(o.ok);
    CHECK(o.code == ErrorCode::kPeerExited);
  }
  return out;
}

}  // namespace

TEST_CASE("a rank that dies before the broadcast makes every other rank throw, quickly") {
  TestDaemon d;
  const std::string job = job_id("dies");
  ChildRank child(d, job, 4, 3);
  REQUIRE(child.line.find("rank=3") == 0);
  std::thread killer([&] {
    std::this_thread::sleep_for(500ms);
    child.proc->signal(SIGKILL);
  });
  auto t0 = std::chrono::steady_clock::now();
  auto out = broadcast_losing_rank3(d, job);
  killer.join();
  for (const auto& o : out) CHECK_THAT(o.what, Catch::Contains("rank 3"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(segments_of(job).empty());
}

TEST_CASE("a rank that dies after the data is ready makes every other rank throw") {
  TestDaemon d;
  const std::string job = job_id("mid");
  // This thread holds rank 0 first, to learn the generation; the child meets
  // the first collective's ready barrier (sequence number 1), then is killed.
  Client first(at(d));
  auto gen = std::to_string(first.join({job, 4, false, 0}).generation);
  ChildRank child(d, job, 4, 3, "muster/coll/" + gen + "/1/ready");
  REQUIRE(child.line.find("rank=3") == 0);
  std::thread killer([&] {
    if (child.proc->read_line(20s).value_or("") == "barrier passed") child.proc->signal(SIGKILL);
  });
  broadcast_losing_rank3(d, job);
  killer.join();
  CHECK(child.proc->wait(5s).has_value());
  CHECK(segments_of(job).empty());
}

namespace {

// A broadcast of 12 MiB + 5 from rank 0 of 3 in which rank 2 plays the
// collective by hand: once the root has published, it flips one byte (in
// chunk 2) of the shared file open_shared(job) opens (read-write), then
// meets the others; no_second_round: it also tells the others that no second
// round follows (as a pool's reader must). Rank 1 must catch the damage by
// the chunk checksums; the root cannot know.
void check_damage_caught(const std::string& tag,
                         const std::function<int(const std::string& job)>& open_shared,
                         bool no_second_round = false) {
  TestDaemon d;
  const std::string job = job_id(tag);
  const size_t size = (size_t{12} << 20) + 5;
  auto out = on_ranks(d, job, 3, all(3), [&](Client& c, uint32_t r) {
    if (r != 2) {
      auto buf = pattern(size, r);
      muster::broadcast(c, buf.data(), buf.size(), 0);
      return;
    }
    auto prefix = "muster/coll/" + std::to_string(c.rank_info().generation) + "/1/";
    c.get(prefix + "0");
    int fd = open_shared(job);
    uint8_t b = 0;
    const off_t at = off_t{9} << 20;
    if (::pread(fd, &b, 1, at) != 1) throw std::runtime_error("pread");
    b ^= 0x40;
    if (::pwrite(fd, &b, 1, at) != 1) throw std::runtime_error("pwrite");
    ::close(fd);
    c.barrier(prefix + "ready");
    c.barrier(prefix + "done");
    if (no_second_round) c.add(prefix + "need", int64_t{1} << 32);
  });
  CHECK(out[0].ok);  // the root cannot know
  CHECK_FALSE(out[1].ok);
  CHECK(out[1].code == ErrorCode::kInternal);
  CHECK_THAT(out[1].what, Catch::Contains("chunk 2") && Catch::Contains("checksum"));
  CHECK(out[2].what == "");
  CHECK(segments_of(job).empty());
}

}  // namespace

TEST_CASE("a damaged segment is caught by the chunk checksums") {
  Env path("MUSTER_BCAST", "shm");
  check_damage_caught("damage", [](const std::string& job) {
    auto segs = segments_of(job);
    if (segs.size() != 1) throw std::runtime_error("expected one segment");
    int fd = ::shm_open(("/" + segs[0]).c_str(), O_RDWR, 0);
    if (fd < 0) throw std::runtime_error("cannot open the segment");
    return fd;
  });
}

TEST_CASE("wrong sizes and NULL data fail where they are seen, and nothing hangs") {
  TestDaemon d;
  SECTION("a receiver with the wrong size") {
    const std::string job = job_id("size");
    std::vector<std::vector<uint8_t>> second(3);
    auto out = on_ranks(d, job, 3, all(3), [&](Client& c, uint32_t r) {
      std::vector<uint8_t> buf(r == 1 ? 100 : 200, static_cast<uint8_t>(r));
      std::optional<Error> first;
      try {
        muster::broadcast(c, buf.data(), buf.size(), 0);
      } catch (const Error& e) {
        first = e;
      }
      // The ranks stay in step: a second broadcast works everywhere.
      second[r].assign(10, static_cast<uint8_t>(r));
      muster::broadcast(c, second[r].data(), second[r].size(), 2);
      if (first) throw *first;
    });
    CHECK(out[0].ok);
    CHECK(out[1].code == ErrorCode::kInvalidArgument);
    CHECK_THAT(out[1].what, Catch::Contains("100") && Catch::Contains("200"));
    CHECK(out[2].ok);
    for (const auto& v : second) CHECK(v == std::vector<uint8_t>(10, 2));
    CHECK(segments_of(job).empty());
  }
  SECTION("a receiver with the wrong size, past the ring") {
    // The root waits for every reader before it reuses a slot of its ring:
    // one that does not read must not keep it waiting.
    const std::string job = job_id("ringsize");
    const size_t size = size_t{40} << 20;
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<uint8_t>> got(3);
    auto out = on_ranks(d, job, 3, all(3), [&](Client& c, uint32_t r) {
      got[r] = pattern(r == 1 ? size + 1 : size, r == 0 ? 1000 : r);
      muster::broadcast(c, got[r].data(), got[r].size(), 0);
    });
    CHECK(out[0].ok);
    CHECK(out[1].code == ErrorCode::kInvalidArgument);
    CHECK(out[2].ok);
    CHECK((got[2] == pattern(size, 1000)));
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  }
  SECTION("a root with NULL data") {
    const std::string job = job_id("null");
    auto t0 = std::chrono::steady_clock::now();
    auto out = on_ranks(d, job, 3, all(3), [&](Client& c, uint32_t r) {
      std::vector<uint8_t> buf(64);
      muster::broadcast(c, r == 0 ? nullptr : buf.data(), buf.size(), 0);
    });
    for (const auto& o : out) {
      CHECK(o.code == ErrorCode::kInvalidArgument);
      CHECK_THAT(o.what, Catch::Contains("NULL"));
    }
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  }
}

// Records the job's shared memory segments while it lives.
struct SegmentWatch {
  std::vector<std::string> seen;
  std::atomic<bool> stop{false};
  std::thread t;
  explicit SegmentWatch(const std::string& job)
      : t([this, job] {
          while (!stop) {
            for (auto& s : segments_of(job))
              if (std::find(seen.begin(), seen.end(), s) == seen.end()) seen.push_back(s);
            std::this_thread::sleep_for(1ms);
          }
        }) {}
  std::vector<std::string> finish() {
    stop = true;
    if (t.joinable()) t.join();
    return seen;
  }
  ~SegmentWatch() { finish(); }
};

TEST_CASE(
    "broadcast through the root's pool: sizes 1 B to 64 MiB, grown and shrunk (made anew), one a "
    "root, sealed against shrinking") {
  Env path("MUSTER_BCAST", "pool");
  TestDaemon d;
  const std::string job = job_id("pool");
  const std::vector<size_t> sizes = {
      1, (size_t{4} << 20) + 3, size_t{64} << 20, size_t{3} << 20, 0, 100000};
  std::vector<std::vector<std::vector<uint8_t>>> got(4);  // [rank][call]
  SegmentWatch watch(job);
  auto out = on_ranks(d, job, 4, all(4), [&](Client& c, uint32_t r) {
    for (int round = 0; round < 2; ++round)
      for (uint32_t root : {0u, 2u})
        for (size_t size : sizes) {
          auto buf = pattern(size, r == root ? 1000 + root + round : r);
          muster::broadcast(c, buf.data(), buf.size(), root);
          got[r].push_back(std::move(buf));
        }
  });
  for (const auto& o : out) REQUIRE(o.what == "");
  size_t call = 0;
  for (int round = 0; round < 2; ++round)
    for (uint32_t root : {0u, 2u})
      for (size_t size : sizes) {
        auto want = pattern(size, 1000 + root + round);
        for (uint32_t r = 0; r < 4; ++r) {
          INFO("round " << round << " root " << root << " size " << size << " rank " << r);
          REQUIRE(got[r][call].size() == size);
          CHECK(got[r][call] == want);
        }
        ++call;
      }
  CHECK(watch.finish().empty());  // nothing went through /dev/shm
  auto pools = pools_of(job);
  CHECK(pools.size() == 2);  // one per root, reused by every call
  CHECK(pools_sealed(job));
  for (const auto& p : pools) CHECK((p.find(".r0.") != p.npos || p.find(".r2.") != p.npos));
}

TEST_CASE("a damaged pool is caught by the chunk checksums") {
  Env path("MUSTER_BCAST", "pool");
  check_damage_caught(
      "pdamage",
      [](const std::string& job) {
        auto pools = pools_of(job);
        if (pools.size() != 1) throw std::runtime_error("expected one pool");
        int fd = -1;
        for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
          std::error_code ec;
          if (std::filesystem::read_symlink(e.path(), ec).string() == pools[0] && !ec) {
            fd = ::open(e.path().c_str(), O_RDWR);
            break;
          }
        }
        if (fd < 0) throw std::runtime_error("cannot open the pool");
        return fd;
      },
      true);
}

// Rank 2 of the fallback test below, run as this program in a process of
// its own (hidden; does nothing without its environment).
TEST_CASE("fallback reader", "[.bcast-child]") {
  const char* job = std::getenv("MUSTER_BC_CHILD_JOB");
  const char* endpoint = std::getenv("MUSTER_BC_CHILD_ENDPOINT");
  if (!job || !endpoint) return;
  const size_t size = std::strtoull(std::getenv("MUSTER_BC_CHILD_SIZE"), nullptr, 10);
  try {
    // Without CAP_SYS_PTRACE, a non-dumpable root's /proc/<pid>/fd is closed.
    __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct caps[2] = {};
    if (::syscall(SYS_capget, &h, caps) != 0) throw std::runtime_error("capget");
    caps[0].effective &= ~(1u << CAP_SYS_PTRACE);
    caps[0].permitted &= ~(1u << CAP_SYS_PTRACE);
    if (::syscall(SYS_capset, &h, caps) != 0) throw std::runtime_error("capset");
    Client c(ClientOptions{endpoint, 10s, 30s});
    c.join({job, 3, false, 2});
    auto buf = pattern(size, 2);
    muster::broadcast(c, buf.data(), buf.size(), 0);
    std::printf(buf == pattern(size, 1000) ? "fallback bytes ok\n" : "fallback bytes wrong\n");
  } catch (const std::exception& e) {
    std::printf("fallback error: %s\n", e.what());
  }
  std::fflush(stdout);
}

TEST_CASE("a reader that may not open the root's pool gets the bytes through a segment") {
  TestDaemon d;
  // Within the ring, and past it: then the root, waiting for the reader
  // that cannot read, gives the ring up for everyone.
  const size_t size = GENERATE((size_t{8} << 20) + 7, (size_t{40} << 20) + 7);
  const std::string job = job_id("fallback" + std::to_string(size));
  // Rank 2 is another process, without CAP_SYS_PTRACE; this one (the
  // root's) is non-dumpable meanwhile, so rank 2 may not open its pool.
  REQUIRE(::prctl(PR_SET_DUMPABLE, 0) == 0);
  SegmentWatch watch(job);
  Process child({std::filesystem::read_symlink("/proc/self/exe").string(), "[.bcast-child]"},
                {{"MUSTER_BC_CHILD_JOB", job},
                 {"MUSTER_BC_CHILD_ENDPOINT", d.endpoint()},
                 {"MUSTER_BC_CHILD_SIZE", std::to_string(size)}});
  std::vector<std::vector<uint8_t>> got(2);
  auto out = on_ranks(d, job, 3, {0, 1}, [&](Client& c, uint32_t r) {
    got[r] = pattern(size, r == 0 ? 1000 : r);
    muster::broadcast(c, got[r].data(), size, 0);
  });
  ::prctl(PR_SET_DUMPABLE, 1);
  auto child_out = child.read_all(20s);
  auto seen = watch.finish();
  for (const auto& o : out) CHECK(o.what == "");
  CHECK_THAT(child_out, Catch::Contains("fallback bytes ok"));
  for (const auto& g : got) CHECK((g == pattern(size, 1000)));
  CHECK(seen.size() == 1);  // the second round's segment, for rank 2 only
  CHECK(segments_of(job).empty());
}

TEST_CASE("the C ABI broadcasts and syncs a model") {
  TestDaemon d;
  const std::string job = job_id("capi");
  std::vector<std::vector<uint8_t>> bytes(3);
  std::vector<std::vector<float>> w(3);
  std::vector<int> rc(3, -1), rc2(3, -1);
  std::vector<std::thread> threads;
  for (uint32_t r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      muster_client* c = muster_client_new(d.endpoint().c_str());
      if (muster_join(c, job.c_str(), 3, 0, static_cast<int>(r), nullptr) == 0) {
        bytes[r] = pattern(5000, r);
        rc[r] = muster_broadcast(c, bytes[r].data(), bytes[r].size(), 1);
        w[r].assign(100, static_cast<float>(r));
        muster_buffer bufs[] = {{w[r].data(), w[r].size() * 4, 1, 1}};
        rc2[r] = muster_sync_model(c, bufs, 1, 1, 0);
      }
      muster_client_free(c);
    });
  for (auto& t : threads) t.join();
  for (uint32_t r = 0; r < 3; ++r) {
    CHECK(rc[r] == 0);
    CHECK(rc2[r] == 0);
    CHECK(bytes[r] == pattern(5000, 1));
    CHECK(w[r] == std::vector<float>(100, 1.0f));  // (0 + 1 + 2) / 3
  }
  muster_client* c = muster_client_new(d.endpoint().c_str());
  CHECK(muster_broadcast(c, nullptr, 0, 0) == static_cast<int>(ErrorCode::kInvalidArgument));
  CHECK_THAT(muster_error_message(c), Catch::Contains("join"));
  muster_buffer bad = {nullptr, 0, 7, 1};
  CHECK(muster_sync_model(c, &bad, 1, 0, 0) == static_cast<int>(ErrorCode::kInvalidArgument));
  muster_client_free(c);
}

// ---- the streamed pool (the default for large broadcasts) ---------------

namespace {

// One broadcast of each of sizes in turn from root, to all of world ranks;
// call i's bytes are pattern(sizes[i], seed + i). No rank fails, and every
// rank ends every call with the root's bytes.
void check_calls_from(const TestDaemon& d, const std::string& job, uint32_t world, uint32_t root,
                      uint32_t seed, const std::vector<size_t>& sizes) {
  std::vector<std::vector<std::vector<uint8_t>>> got(world);
  auto out = on_ranks(d, job, world, all(world), [&](Client& c, uint32_t r) {
    for (size_t i = 0; i < sizes.size(); ++i) {
      auto buf = pattern(sizes[i], r == root ? seed + static_cast<uint32_t>(i) : r);
      muster::broadcast(c, buf.data(), buf.size(), root);
      got[r].push_back(std::move(buf));
    }
  });
  for (const auto& o : out) REQUIRE(o.what == "");
  for (size_t i = 0; i < sizes.size(); ++i)
    for (uint32_t r = 0; r < world; ++r) {
      INFO("call " << i << " rank " << r);
      CHECK((got[r][i] == pattern(sizes[i], seed + static_cast<uint32_t>(i))));
    }
}

}  // namespace

TEST_CASE("streamed broadcasts through one pool give each call's bytes, never a previous call's") {
  Env path("MUSTER_BCAST", "stream");
  TestDaemon d;
  const std::string job = job_id("stream");
  // Same sizes twice in a row with other bytes: a reader that took the
  // previous call's chunks (still in the pool, with matching checksums)
  // would get them.
  const std::vector<size_t> sizes = {1,
                                     (size_t{12} << 20) + 5,
                                     (size_t{12} << 20) + 5,
                                     size_t{4} << 20,
                                     size_t{4} << 20,
                                     size_t{33} << 20};
  check_calls_from(d, job, 3, 1, 2000, sizes);
  CHECK(pools_of(job).size() == 1);
  CHECK(segments_of(job).empty());
}

namespace {

// A hidden child's settings MUSTER_BC_<role>_<name>, in the order of
// names; none when any is unset (the child does nothing then: run with the
// rest of the suite).
std::vector<std::string> child_env(const std::string& role,
                                   std::initializer_list<const char*> names) {
  std::vector<std::string> values;
  for (const char* name : names) {
    const char* v = std::getenv(("MUSTER_BC_" + role + "_" + name).c_str());
    if (!v) return {};
    values.emplace_back(v);
  }
  return values;
}

// For a hidden child that faults on purpose: no core file, and handler
// (SIG_DFL: die of the fault) on SIGSEGV and SIGBUS.
void on_faults(void (*handler)(int)) {
  rlimit none{0, 0};
  ::setrlimit(RLIMIT_CORE, &none);
  struct sigaction sa {};
  sa.sa_handler = handler;
  ::sigaction(SIGSEGV, &sa, nullptr);
  ::sigaction(SIGBUS, &sa, nullptr);
}

// A private anonymous mapping of size bytes in whole pages (len), never
// unmapped: the child's buffer, part of which it protects.
struct Mapping {
  size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t len;
  uint8_t* bytes;
  explicit Mapping(size_t size) : len((size + page - 1) / page * page) {
    void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap");
    bytes = static_cast<uint8_t*>(p);
  }
};

}  // namespace

// Rank 0 of the tests below, run as this program in a process of its own
// (hidden; does nothing without its environment). Its buffer is readable
// only up to MUSTER_BC_ROOT_GUARD bytes, so the root faults there in the
// middle of its stream: with MUSTER_BC_ROOT_MODE=stall it sleeps 400 ms in
// the fault handler and then goes on (readers wait on chunks not written
// yet); with die, the fault kills it.
constexpr size_t kRootSize = (size_t{32} << 20) + 9;

uint8_t* guard_at = nullptr;
size_t guard_len = 0;

void stall_handler(int) {
  static const char msg[] = "stalled\n";
  ssize_t k = ::write(1, msg, sizeof msg - 1);
  (void)k;
  timespec ts{0, 400 * 1000 * 1000};
  while (::nanosleep(&ts, &ts) != 0) {
  }
  ::mprotect(guard_at, guard_len, PROT_READ | PROT_WRITE);
}

TEST_CASE("stream root", "[.bcast-root]") {
  const auto env = child_env("ROOT", {"JOB", "ENDPOINT", "MODE", "GUARD"});
  if (env.empty()) return;
  const std::string &job = env[0], &endpoint = env[1], &mode = env[2];
  try {
    on_faults(mode == "stall" ? stall_handler : SIG_DFL);
    const Mapping m(kRootSize);
    auto* buf = m.bytes;
    auto want = pattern(kRootSize, 1000);
    std::memcpy(buf, want.data(), kRootSize);
    guard_at = buf + std::stoull(env[3]) / m.page * m.page;
    guard_len = static_cast<size_t>(buf + m.len - guard_at);
    Client c(ClientOptions{endpoint, 10s, 30s});
    c.join({job, 3, false, 0});
    if (::mprotect(guard_at, guard_len, PROT_NONE) != 0) throw std::runtime_error("mprotect");
    muster::broadcast(c, buf, kRootSize, 0);
    std::printf("root ok\n");
  } catch (const std::exception& e) {
    std::printf("root error: %s\n", e.what());
  }
  std::fflush(stdout);
}

std::unique_ptr<Process> stream_root(const TestDaemon& d, const std::string& job, const char* mode,
                                     size_t guard) {
  return std::make_unique<Process>(
      std::vector<std::string>{std::filesystem::read_symlink("/proc/self/exe").string(),
                               "[.bcast-root]"},
      std::map<std::string, std::string>{{"MUSTER_BC_ROOT_JOB", job},
                                         {"MUSTER_BC_ROOT_ENDPOINT", d.endpoint()},
                                         {"MUSTER_BC_ROOT_MODE", mode},
                                         {"MUSTER_BC_ROOT_GUARD", std::to_string(guard)},
                                         {"MUSTER_BCAST", "stream"}});
}

TEST_CASE("streamed readers that wait on chunks not yet written get the root's exact bytes") {
  Env path("MUSTER_BCAST", "stream");
  TestDaemon d;
  const std::string job = job_id("stall");
  // The root stalls before its first byte: readers start, and wait, first.
  auto root = stream_root(d, job, "stall", 0);
  std::vector<std::vector<uint8_t>> got(2);
  auto t0 = std::chrono::steady_clock::now();
  auto out = on_ranks(d, job, 3, {1, 2}, [&](Client& c, uint32_t r) {
    got[r - 1] = pattern(kRootSize, r);
    muster::broadcast(c, got[r - 1].data(), kRootSize, 0);
  });
  auto took = std::chrono::steady_clock::now() - t0;
  auto root_out = root->read_all(20s);
  CHECK_THAT(root_out, Catch::Contains("stalled\n") && Catch::Contains("root ok\n"));
  for (const auto& o : out) CHECK(o.what == "");
  for (const auto& g : got) CHECK((g == pattern(kRootSize, 1000)));
  CHECK(took >= 400ms);  // they did wait for the stalled root
  CHECK(root->wait(5s) == 0);
}

TEST_CASE("a root that dies in the middle of its stream makes the readers throw, not hang") {
  Env path("MUSTER_BCAST", "stream");
  TestDaemon d;
  const std::string job = job_id("rootdies");
  // Chunks 0 to 4 are written; the root dies reading its chunk 5.
  auto root = stream_root(d, job, "die", size_t{21} << 20);
  auto t0 = std::chrono::steady_clock::now();
  auto out = on_ranks(d, job, 3, {1, 2}, [&](Client& c, uint32_t r) {
    auto buf = pattern(kRootSize, r);
    muster::broadcast(c, buf.data(), kRootSize, 0);
  });
  for (const auto& o : out) {
    CHECK_FALSE(o.ok);
    CHECK(o.code == ErrorCode::kPeerExited);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(root->wait(5s) == 128 + SIGSEGV);
  CHECK_THAT(root->read_all(1s), !Catch::Contains("root"));
}

// ---- the ring (the default stream on one node) ---------------------------

// The size of the job's pool (the root's memfd) held by this process.
size_t pool_bytes(const std::string& job) {
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    auto link = std::filesystem::read_symlink(e.path(), ec).string();
    if (!ec && link.rfind("/memfd:muster.pool." + job + ".", 0) == 0) {
      struct stat st {};
      if (::stat(e.path().c_str(), &st) == 0) return static_cast<size_t>(st.st_size);
    }
  }
  return 0;
}

TEST_CASE(
    "broadcasts many times the ring's size give every rank the root's bytes; the pool stays "
    "small") {
  TestDaemon d;
  const std::string job = job_id("ring");
  // Each wraps the 16-slot ring of 1 MiB chunks many times; odd tails.
  const std::vector<size_t> sizes = {(size_t{16} << 20) + 1, (size_t{100} << 20) + 3,
                                     (size_t{37} << 20) - 5};
  check_calls_from(d, job, 4, 3, 3000, sizes);
  CHECK(pools_of(job).size() == 1);
  // The ring and its header, not a copy of the 100 MiB broadcast.
  CHECK(pool_bytes(job) > (size_t{16} << 20));
  CHECK(pool_bytes(job) <= (size_t{20} << 20));
  CHECK(segments_of(job).empty());
}

// Rank 2 of the test below, run as this program in a process of its own
// (hidden; does nothing without its environment): its buffer is writable
// only up to MUSTER_BC_READER_GUARD bytes, so it dies copying the chunk
// there, in the middle of the root's ring.
TEST_CASE("ring reader", "[.bcast-reader]") {
  const auto env = child_env("READER", {"JOB", "ENDPOINT", "SIZE", "GUARD"});
  if (env.empty()) return;
  const std::string &job = env[0], &endpoint = env[1];
  try {
    // Die of the fault itself, also under a sanitizer that would catch it.
    on_faults(SIG_DFL);
    const size_t size = std::stoull(env[2]);
    const Mapping m(size);
    auto* buf = m.bytes;
    const size_t at = std::stoull(env[3]) / m.page * m.page;
    Client c(ClientOptions{endpoint, 10s, 30s});
    c.join({job, 3, false, 2});
    if (::mprotect(buf + at, m.len - at, PROT_READ) != 0) throw std::runtime_error("mprotect");
    std::printf("reading\n");
    std::fflush(stdout);
    muster::broadcast(c, buf, size, 0);
    std::printf("reader ok\n");
  } catch (const std::exception& e) {
    std::printf("reader error: %s\n", e.what());
  }
  std::fflush(stdout);
}

TEST_CASE(
    "a reader that dies in the middle of the ring makes the root and the others throw, not hang") {
  TestDaemon d;
  const std::string job = job_id("readerdies");
  const size_t size = size_t{64} << 20;
  Process reader({std::filesystem::read_symlink("/proc/self/exe").string(), "[.bcast-reader]"},
                 {{"MUSTER_BC_READER_JOB", job},
                  {"MUSTER_BC_READER_ENDPOINT", d.endpoint()},
                  {"MUSTER_BC_READER_SIZE", std::to_string(size)},
                  {"MUSTER_BC_READER_GUARD", std::to_string(size_t{5} << 20)}});
  auto t0 = std::chrono::steady_clock::now();
  auto out = on_ranks(d, job, 3, {0, 1}, [&](Client& c, uint32_t r) {
    auto buf = pattern(size, r == 0 ? 1000 : r);
    muster::broadcast(c, buf.data(), size, 0);
  });
  for (const auto& o : out) {
    CHECK_FALSE(o.ok);
    CHECK(o.code == ErrorCode::kPeerExited);
  }
  CHECK_THAT(out[0].what, Catch::Contains("rank 2"));
  CHECK(std::chrono::steady_clock::now() - t0 < 10s);
  CHECK(reader.wait(5s) == 128 + SIGSEGV);
  CHECK_THAT(reader.read_all(1s), Catch::Contains("reading") && !Catch::Contains("reader "));
}
