// A rank's broadcast pool as its daemon opens it (daemon/cluster/
// pool_files.cpp): the daemon may run as root, and the reference comes from
// a local process, so everything but that process's own libmuster pool is
// refused with a code and a sentence, and what the process does to its
// file afterwards (shrink it, put another file under the same fd, punch
// holes in a mapped one) never reaches anything else or kills the daemon.
#include <fcntl.h>
#include <linux/falloc.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cluster/broadcast/pool_files.hpp"
#include "muster/error.hpp"

using namespace muster;
using namespace muster::daemon;

namespace {

constexpr size_t kSize = 3 << 20;

struct Memfd {
  int fd = -1;
  proto::PoolRef ref;
  // sealed: against shrinking, as libmuster's pools are (then the daemon
  // maps it).
  explicit Memfd(const char* name, size_t size = kSize, uint64_t offset = 4096,
                 bool sealed = false) {
    fd = ::memfd_create(name, MFD_CLOEXEC | (sealed ? MFD_ALLOW_SEALING : 0));
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(size)) == 0);
    if (sealed) REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
    REQUIRE(::posix_fallocate(fd, 0, static_cast<off_t>(size)) == 0);  // as libmuster's pools
    struct stat st {};
    REQUIRE(::fstat(fd, &st) == 0);
    ref = proto::PoolRef{fd, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                         offset};
  }
  ~Memfd() { ::close(fd); }
};

ErrorCode code_of(PoolFiles& files, int64_t pid, int64_t uid, const proto::PoolRef& ref,
                  uint64_t end, bool write) {
  try {
    files.open(pid, uid, ref, end, write);
  } catch (const Error& e) {
    CHECK(std::string(e.what()).size() > 10);  // a sentence, not just a code
    return e.code();
  }
  return ErrorCode::kOk;
}

}  // namespace

TEST_CASE("a rank's own pool is read and written where the broadcast says", "[bcast][pool]") {
  Memfd pool("muster.pool.job.r0.0123456789abcdef");
  PoolFiles files;
  const int64_t pid = ::getpid(), uid = ::getuid();
  auto w = files.open(pid, uid, pool.ref, kSize, true);
  const std::string bytes(1 << 20, 'q');
  w->write(pool.ref.offset + 100, bytes.data(), bytes.size());
  std::string back(bytes.size(), '\0');
  REQUIRE(::pread(pool.fd, back.data(), back.size(), 4096 + 100) == ssize_t(back.size()));
  CHECK(back == bytes);
  auto r = files.open(pid, uid, pool.ref, kSize, false);
  std::string again(bytes.size(), '\0');
  r->read(pool.ref.offset + 100, again.data(), again.size());
  CHECK(again == bytes);
  // Kept for the next chunk: the same file, not opened again.
  CHECK(files.open(pid, uid, pool.ref, kSize, true) == w);
  CHECK(files.size() == 2);
  files.expire(std::chrono::steady_clock::now() + PoolFiles::kIdle + std::chrono::seconds(1));
  CHECK(files.size() == 0);
}

TEST_CASE("anything but the asking process's own libmuster pool is refused", "[bcast][pool]") {
  Memfd pool("muster.pool.job.r0.0123456789abcdef");
  PoolFiles files;
  const int64_t pid = ::getpid(), uid = ::getuid();
  // Not from a local process (an in-process caller, a peer).
  CHECK(code_of(files, 0, uid, pool.ref, kSize, true) == ErrorCode::kPermissionDenied);
  CHECK(code_of(files, pid, -1, pool.ref, kSize, true) == ErrorCode::kPermissionDenied);
  // Another uid's pool (a memfd is its creator's).
  CHECK(code_of(files, pid, uid + 1, pool.ref, kSize, true) == ErrorCode::kPermissionDenied);
  // Another file than the one announced: its inode, its device.
  auto other = pool.ref;
  other.ino += 1;
  CHECK(code_of(files, pid, uid, other, kSize, true) == ErrorCode::kPermissionDenied);
  other = pool.ref;
  other.dev += 1;
  CHECK(code_of(files, pid, uid, other, kSize, true) == ErrorCode::kPermissionDenied);
  // A descriptor the process does not hold.
  other = pool.ref;
  other.fd = 1 << 20;
  CHECK(code_of(files, pid, uid, other, kSize, true) == ErrorCode::kPermissionDenied);
  // A memfd that is not a pool of libmuster, and a plain file.
  Memfd stranger("not-a-pool");
  CHECK(code_of(files, pid, uid, stranger.ref, kSize, true) == ErrorCode::kPermissionDenied);
  char path[] = "/tmp/muster-pool-test-XXXXXX";
  int plain = ::mkstemp(path);
  REQUIRE(plain >= 0);
  ::unlink(path);
  REQUIRE(::ftruncate(plain, kSize) == 0);
  struct stat st {};
  REQUIRE(::fstat(plain, &st) == 0);
  proto::PoolRef file_ref{plain, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino),
                          0};
  CHECK(code_of(files, pid, uid, file_ref, kSize, true) == ErrorCode::kPermissionDenied);
  // Another process's descriptor under the asking pid's name: pid 1's fd
  // of the same number is not this file.
  CHECK(code_of(files, 1, uid, pool.ref, kSize, true) == ErrorCode::kPermissionDenied);
  // Smaller than the broadcast it is named for.
  CHECK(code_of(files, pid, uid, pool.ref, kSize + 1, true) == ErrorCode::kInvalidArgument);
  CHECK(files.size() == 1);  // only the pool itself was opened (then found too small)
  ::close(plain);
}

TEST_CASE("what the process does to its pool afterwards reaches nothing else", "[bcast][pool]") {
  Memfd pool("muster.pool.job.r0.0123456789abcdef");
  PoolFiles files;
  const int64_t pid = ::getpid(), uid = ::getuid();
  auto f = files.open(pid, uid, pool.ref, kSize, false);
  // Shrunk under the daemon: a short read is an error, not a SIGBUS.
  REQUIRE(::ftruncate(pool.fd, 4096) == 0);
  std::string buf(1 << 20, '\0');
  try {
    f->read(pool.ref.offset, buf.data(), buf.size());
    FAIL("read past the end of a shrunk pool");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
  }
  CHECK(code_of(files, pid, uid, pool.ref, kSize, false) == ErrorCode::kInvalidArgument);
  // Another file put under the same descriptor number: what was opened is
  // still the pool it checked; the new file is never written.
  REQUIRE(::ftruncate(pool.fd, kSize) == 0);
  REQUIRE(::posix_fallocate(pool.fd, 0, kSize) == 0);  // grown as libmuster grows one
  auto w = files.open(pid, uid, pool.ref, kSize, true);
  char path[] = "/tmp/muster-pool-test-XXXXXX";
  int plain = ::mkstemp(path);
  REQUIRE(plain >= 0);
  ::unlink(path);
  int saved = ::dup(pool.fd);
  REQUIRE(::dup2(plain, pool.fd) == pool.fd);
  const std::string bytes(4096, 'z');
  w->write(pool.ref.offset, bytes.data(), bytes.size());
  struct stat st {};
  REQUIRE(::fstat(plain, &st) == 0);
  CHECK(st.st_size == 0);
  std::string back(bytes.size(), '\0');
  REQUIRE(::pread(saved, back.data(), back.size(), 4096) == ssize_t(back.size()));
  CHECK(back == bytes);
  // And an open under that number now finds a plain file: refused, kept
  // or not.
  CHECK(code_of(files, pid, uid, pool.ref, kSize, true) == ErrorCode::kPermissionDenied);
  PoolFiles fresh;
  CHECK(code_of(fresh, pid, uid, pool.ref, kSize, true) == ErrorCode::kPermissionDenied);
  ::close(plain);
  ::close(saved);
}

TEST_CASE("a write never grows a pool the rank shrank after it was opened", "[bcast][pool]") {
  Memfd pool("muster.pool.job.r0.0123456789abcdef");
  PoolFiles files;
  auto w = files.open(::getpid(), ::getuid(), pool.ref, kSize, true);
  REQUIRE(::ftruncate(pool.fd, 1 << 20) == 0);
  const std::string bytes(4096, 'h');
  try {
    w->write((1 << 20) - 100, bytes.data(), bytes.size());
    FAIL("wrote past the end of a shrunk pool");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::kInvalidArgument);
  }
  struct stat st {};
  REQUIRE(::fstat(pool.fd, &st) == 0);
  CHECK(st.st_size == (1 << 20));
  w->write(0, bytes.data(), bytes.size());  // within it: fine
}

TEST_CASE("a process cannot have the daemon hold any number of pools open", "[bcast][pool]") {
  PoolFiles files;
  std::vector<std::unique_ptr<Memfd>> pools;
  std::vector<std::shared_ptr<PoolFile>> held;  // as requests in flight hold them
  for (size_t k = 0; k < PoolFiles::kMaxLive; ++k) {
    pools.push_back(std::make_unique<Memfd>("muster.pool.job.r0.many", 8192, 0));
    held.push_back(files.open(::getpid(), ::getuid(), pools.back()->ref, 8192, true));
  }
  Memfd one_more("muster.pool.job.r0.many", 8192, 0);
  CHECK(code_of(files, ::getpid(), ::getuid(), one_more.ref, 8192, true) ==
        ErrorCode::kUnavailable);
  held.clear();  // answered: they go
  CHECK(code_of(files, ::getpid(), ::getuid(), one_more.ref, 8192, true) == ErrorCode::kOk);
}

// ---- sealed pools: mapped (cluster/broadcast/pool_maps.cpp) ---------------------------

namespace {

// A pool of this process sealed against shrinking, as libmuster makes
// them, and the daemon's files.
struct SealedPool {
  Memfd pool{"muster.pool.job.r0.0123456789abcdef", kSize, 4096, true};
  PoolFiles files;
  std::shared_ptr<PoolFile> open(bool write) {
    return files.open(::getpid(), ::getuid(), pool.ref, kSize, write);
  }
};

}  // namespace

TEST_CASE("a pool sealed against shrinking is mapped; its chunks go out from its own pages",
          "[bcast][pool]") {
  SealedPool sp;
  const Memfd& pool = sp.pool;
  auto w = sp.open(true);
  REQUIRE(w->map != nullptr);
  CHECK(w->mapped == kSize);
  const std::string bytes(1 << 20, 'm');
  w->write(4096 + 100, bytes.data(), bytes.size());
  std::string back(bytes.size(), '\0');
  REQUIRE(::pread(pool.fd, back.data(), back.size(), 4096 + 100) == ssize_t(back.size()));
  CHECK(back == bytes);
  auto r = sp.open(false);
  REQUIRE(r->map != nullptr);
  std::string again(bytes.size(), '\0');
  r->read(4096 + 100, again.data(), again.size());
  CHECK(again == bytes);
  // A chunk's frame: the head, then the file's bytes, in one span; the
  // bytes are the pool's pages themselves (a later write shows in them).
  const std::string head = "HEAD-of-a-frame";
  auto c = map_chunk(*r, head, 4096, 1 << 20);
  REQUIRE(c);
  REQUIRE(c->frame.size() == head.size() + (1 << 20));
  CHECK(c->frame.substr(0, head.size()) == head);
  CHECK(c->frame.substr(head.size() + 100, 5) == "mmmmm");
  REQUIRE(::pwrite(pool.fd, "LIVE", 4, 4096) == 4);
  CHECK(c->frame.substr(head.size(), 4) == "LIVE");
  // While that frame is out, the same chunk gets a span of its own; once
  // it is back, the kept one serves again.
  const char* first = c->frame.data();
  auto c2 = map_chunk(*r, "other head", 4096, 1 << 20);
  REQUIRE(c2);
  CHECK(c2->frame.data() + 10 != first + head.size());
  CHECK(c->frame.substr(0, head.size()) == head);  // not overwritten
  c2.reset();
  c.reset();
  auto c3 = map_chunk(*r, head, 4096, 1 << 20);
  REQUIRE(c3);
  CHECK(c3->frame.data() == first);
  // Not on a page, a head longer than a page, past the mapping: the caller
  // copies instead.
  CHECK_FALSE(map_chunk(*r, head, 4096 + 100, 4096));
  CHECK_FALSE(map_chunk(*r, std::string(5000, 'h'), 4096, 4096));
  CHECK_FALSE(map_chunk(*r, head, kSize - 4096, 8192));
}

TEST_CASE("a pool without the seal is never mapped: pread and pwrite, as before", "[bcast][pool]") {
  Memfd pool("muster.pool.job.r0.0123456789abcdef");
  PoolFiles files;
  auto r = files.open(::getpid(), ::getuid(), pool.ref, kSize, false);
  CHECK(r->map == nullptr);
  CHECK_FALSE(map_chunk(*r, "head", 4096, 4096));
  // The rank cannot undo the seal of a sealed one: it never shrinks.
  Memfd sealed("muster.pool.job.r0.0123456789abcdef", kSize, 4096, true);
  CHECK(::ftruncate(sealed.fd, 4096) != 0);
  CHECK(errno == EPERM);
}

TEST_CASE("holes the rank punches in a mapped pool cost it its bytes, not the daemon its life",
          "[bcast][pool]") {
  SealedPool sp;
  const Memfd& pool = sp.pool;
  auto w = sp.open(true);
  auto r = sp.open(false);
  REQUIRE(w->map);
  const std::string bytes(1 << 20, 'p');
  w->write(4096, bytes.data(), bytes.size());
  auto c = map_chunk(*r, "h", 4096, 1 << 20);
  REQUIRE(c);
  // The pages under the daemon's mappings and its frame go.
  REQUIRE(::fallocate(pool.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, kSize) == 0);
  std::string back(bytes.size(), 'x');
  r->read(4096, back.data(), back.size());
  CHECK(back == std::string(bytes.size(), '\0'));
  CHECK(c->frame.substr(1, 4) == std::string(4, '\0'));
  w->write(4096, bytes.data(), bytes.size());  // pages again, for the daemon's write
  r->read(4096, back.data(), back.size());
  CHECK(back == bytes);
  c.reset();
  auto again = map_chunk(*r, "h", 4096, 1 << 20);
  REQUIRE(again);
  CHECK(again->frame.substr(1, 4) == "pppp");
}

TEST_CASE("a pool with holes is refused: the daemon allocates no rank's memory for it",
          "[bcast][pool][hostile]") {
  PoolFiles files;
  const int64_t pid = ::getpid(), uid = ::getuid();
  // A TiB the rank never allocated (ftruncate only), sealed, as a broadcast
  // of that size would name it: every page the daemon touched would be
  // allocated then, and charged to the daemon.
  int fd = ::memfd_create("muster.pool.job.r0.sparse", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  REQUIRE(fd >= 0);
  const uint64_t tib = uint64_t{1} << 40;
  REQUIRE(::ftruncate(fd, static_cast<off_t>(tib)) == 0);
  REQUIRE(::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) == 0);
  struct stat st {};
  REQUIRE(::fstat(fd, &st) == 0);
  const proto::PoolRef sparse{fd, static_cast<uint64_t>(st.st_dev),
                              static_cast<uint64_t>(st.st_ino), 0};
  for (bool write : {false, true})
    CHECK(code_of(files, pid, uid, sparse, tib, write) == ErrorCode::kInvalidArgument);
  ::close(fd);
  // One hole of a page in an otherwise allocated pool is enough; allocated
  // again, the pool is taken. (libmuster allocates its pools whole, and the
  // pages it allocated but has not written yet count as allocated.)
  Memfd holed("muster.pool.job.r0.holed", kSize, 4096, true);
  REQUIRE(::fallocate(holed.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 8192, 4096) == 0);
  CHECK(code_of(files, pid, uid, holed.ref, kSize, false) == ErrorCode::kInvalidArgument);
  REQUIRE(::posix_fallocate(holed.fd, 0, kSize) == 0);
  CHECK(code_of(files, pid, uid, holed.ref, kSize, false) == ErrorCode::kOk);
}

TEST_CASE("the daemon maps pools only within its budget", "[bcast][pool]") {
  const int64_t pid = ::getpid(), uid = ::getuid();
  // A small budget: two pools of 3 MiB fit, the third is read and written
  // without a mapping, and mapped once one of the others has gone.
  set_pool_map_budget(7 << 20);
  {
    Memfd a("muster.pool.job.r0.a", kSize, 4096, true),
        b("muster.pool.job.r0.b", kSize, 4096, true), c("muster.pool.job.r0.c", kSize, 4096, true);
    PoolFiles mine;
    auto fa = mine.open(pid, uid, a.ref, kSize, true);
    auto fb = mine.open(pid, uid, b.ref, kSize, true);
    auto fc = mine.open(pid, uid, c.ref, kSize, true);
    CHECK(fa->map);
    CHECK(fb->map);
    CHECK_FALSE(fc->map);
    CHECK_FALSE(map_chunk(*fb, "h", 4096, 1 << 20));  // a span would pass the budget too
    const std::string bytes(1 << 20, 'c');
    fc->write(4096, bytes.data(), bytes.size());
    std::string got(bytes.size(), '\0');
    fc->read(4096, got.data(), got.size());
    CHECK(got == bytes);
    fa.reset();
    mine.expire(std::chrono::steady_clock::now() + PoolFiles::kIdle + std::chrono::seconds(1));
    fc = mine.open(pid, uid, c.ref, kSize, true);
    CHECK(fc->map);
    fc->read(4096, got.data(), got.size());
    CHECK(got == bytes);
  }
  set_pool_map_budget(0);  // back to twice the machine's memory
}
