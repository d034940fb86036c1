// Model broadcast and averaging on one node: Client::broadcast and
// Client::sync_model.
//
// Bulk bytes travel through POSIX shared memory, never through the daemon:
// a publishing rank creates a segment
// (/dev/shm/muster.<job>.<generation>.<seq>.r<rank>.<nonce>), copies its
// bytes in, checksumming each 4 MiB chunk, and stores a small metadata value
// (size, chunk size, checksums, segment name, or an error) in the job's store
// under muster/coll/<generation>/<seq>/<rank>. Then:
//
//   publisher: set(meta)  barrier(ready)                          barrier(done)  unlink, delete
//   reader:               barrier(ready)  get(meta)  map + copy    barrier(done)
//
// Readers verify every chunk's checksum; a mismatch throws kInternal. The
// done barrier is entered iff every meta read says "ok", so all ranks agree
// on whether to wait there; a rank with a local error (size mismatch, bad
// checksum) still enters it, then throws. A publisher that cannot publish
// stores its error instead and meets the others at the ready barrier, so
// they throw it too rather than time out. Barriers fail fast with
// peer_exited when a rank ends, so a dead rank makes every other rank throw.
// Segments are unlinked by their creator on every path (RAII); only a
// SIGKILLed creator leaves one behind. Metadata keys are deleted after a
// completed collective; a failed one leaves them (tiny) for the job's life.
//
// Speed (256 MiB): the creator writes with pwrite (no zeroing of the new
// pages, no page tables), checksumming each block just before the kernel
// copies it from cache; readers map the segment and copy with one fused
// pass (AVX2 non-temporal stores + crc32c lanes) at memcpy speed.
//
// Broadcasts of kPoolMin bytes or more go through the root's pool instead
// (see Pool): a memfd kept mapped across calls, so that no pages are
// allocated or freed per call (256 MiB: ~110 ms to allocate, ~35 ms to free
// as a fresh segment). Same metadata, checksums and barriers; a reader that
// may not open the pool adds to a counter before the done barrier, and if
// any did, every rank then runs a second round through a segment. Both
// paths give the same guarantees: a reader claims success only after the
// done barrier, which fails when any rank has died, and only with verified
// bytes. By default the pool is streamed (see StreamHeader): the root
// stores its metadata before it writes, and readers copy each chunk as soon
// as the root has written it, sleeping on a futex in the pool between
// chunks, so that the root's copy and the readers' overlap. MUSTER_BCAST=
// shm|pool|stream forces one path (pool: written whole before the ready
// barrier, checksums in the metadata).
//
// The sequence number of a collective comes from a per-rank counter in the
// job's store (muster/coll/seq/<rank>): ranks that call collectives in the
// same order get the same numbers, whatever Client object they use.
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "client_impl.hpp"
#include "muster/client.hpp"

namespace muster {
namespace {

constexpr size_t kChunk = size_t{4} << 20;    // checksum granularity
constexpr size_t kBlock = size_t{256} << 10;  // hash, then copy while still in cache
constexpr size_t kReduceBlock = size_t{64} << 10;
constexpr size_t kAlign = 64;                   // offsets of packed buffers
constexpr uint32_t kMagic = 0x3342534d;         // "MSB3"
constexpr size_t kPoolMin = size_t{1} << 20;    // smaller broadcasts use a fresh segment
constexpr size_t kPoolGrain = size_t{2} << 20;  // pool sizes are multiples of this

// ---- checksums ---------------------------------------------------------
//
// Four independent lanes over 32-byte groups (so the CPU overlaps them),
// then a mix of the lanes, the tail bytes and the length. Algorithm 1 runs
// crc32c (SSE4.2) in the lanes, algorithm 2 an xxhash64-style multiply
// round; the metadata names the one used, readers follow it.

enum Algo : uint32_t { kCrc32c = 1, kMul64 = 2 };

constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL,
                   P3 = 0x165667B19E3779F9ULL, P4 = 0x85EBCA77C2B2AE63ULL,
                   P5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) {
  return (x << r) | (x >> (64 - r));
}
inline uint64_t load64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

using BulkFn = void (*)(uint64_t* lanes, const uint8_t* p, size_t n);  // n % 32 == 0

void mul_bulk(uint64_t* l, const uint8_t* p, size_t n) {
  uint64_t a = l[0], b = l[1], c = l[2], d = l[3];
  for (size_t i = 0; i < n; i += 32) {
    a = rotl(a + load64(p + i) * P2, 31) * P1;
    b = rotl(b + load64(p + i + 8) * P2, 31) * P1;
    c = rotl(c + load64(p + i + 16) * P2, 31) * P1;
    d = rotl(d + load64(p + i + 24) * P2, 31) * P1;
  }
  l[0] = a, l[1] = b, l[2] = c, l[3] = d;
}

// Portable crc32c (Castagnoli, reflected), for a reader without SSE4.2.
uint32_t crc32c_sw_u64(uint32_t crc, uint64_t v) {
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (int k = 0; k < 8; ++k) crc = table[(crc ^ (v >> (8 * k))) & 0xFF] ^ (crc >> 8);
  return crc;
}

void crc_bulk_sw(uint64_t* l, const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i += 32)
    for (int k = 0; k < 4; ++k)
      l[k] = crc32c_sw_u64(static_cast<uint32_t>(l[k]), load64(p + i + 8 * k));
}

// Copies n bytes (n % 32 == 0) and runs the lanes over them in one pass:
// the bytes are read once, and the stores bypass the cache when dst allows.
using CopyFn = void (*)(uint64_t* lanes, uint8_t* dst, const uint8_t* src, size_t n);

#if defined(__x86_64__)
__attribute__((target("sse4.2,avx2"))) void crc_copy_avx2(uint64_t* l, uint8_t* dst,
                                                          const uint8_t* src, size_t n) {
  uint64_t a = l[0], b = l[1], c = l[2], d = l[3];
  const bool stream = reinterpret_cast<uintptr_t>(dst) % 32 == 0;
  for (size_t i = 0; i < n; i += 32) {
    __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    if (stream)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst + i), v);
    else
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), v);
    a = _mm_crc32_u64(a, load64(src + i));
    b = _mm_crc32_u64(b, load64(src + i + 8));
    c = _mm_crc32_u64(c, load64(src + i + 16));
    d = _mm_crc32_u64(d, load64(src + i + 24));
  }
  if (stream) _mm_sfence();
  l[0] = a, l[1] = b, l[2] = c, l[3] = d;
}

__attribute__((target("sse4.2"))) void crc_bulk_hw(uint64_t* l, const uint8_t* p, size_t n) {
  uint64_t a = l[0], b = l[1], c = l[2], d = l[3];
  for (size_t i = 0; i < n; i += 32) {
    a = _mm_crc32_u64(a, load64(p + i));
    b = _mm_crc32_u64(b, load64(p + i + 8));
    c = _mm_crc32_u64(c, load64(p + i + 16));
    d = _mm_crc32_u64(d, load64(p + i + 24));
  }
  l[0] = a, l[1] = b, l[2] = c, l[3] = d;
}
bool have_sse42() {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
CopyFn copy_for(Algo a) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  return a == kCrc32c && have_sse42() && avx2 ? crc_copy_avx2 : nullptr;
}
#else
bool have_sse42() {
  return false;
}
CopyFn copy_for(Algo) {
  return nullptr;
}
#endif

// The algorithm a publisher uses. MUSTER_CHECKSUM=crc32c|mul64 overrides
// (benchmarks, tests of the fallback).
Algo preferred_algo() {
  static const Algo a = [] {
    const char* e = std::getenv("MUSTER_CHECKSUM");
    if (e && std::string_view(e) == "mul64") return kMul64;
    if (e && std::string_view(e) == "crc32c") return kCrc32c;
    return have_sse42() ? kCrc32c : kMul64;
  }();
  return a;
}

BulkFn bulk_for(Algo a) {
  if (a == kMul64) return mul_bulk;
#if defined(__x86_64__)
  if (have_sse42()) return crc_bulk_hw;
#endif
  return crc_bulk_sw;
}

// Streaming hash: update() with any split of the bytes gives the same value.
class Hasher {
 public:
  explicit Hasher(Algo a) : algo_(a), bulk_(bulk_for(a)), copy_(copy_for(a)) { reset(); }
  void reset() {
    if (algo_ == kMul64)
      lanes_ = {P1 + P2, P2, 0, 0 - P1};
    else
      lanes_ = {0xFFFFFFFFu, 0x1234567u, 0x89ABCDEu, 0xF0F0F0Fu};
    npend_ = 0;
    total_ = 0;
  }
  void update(const uint8_t* p, size_t n) {
    total_ += n;
    if (npend_) {
      size_t k = std::min(n, sizeof pend_ - npend_);
      std::memcpy(pend_ + npend_, p, k);
      npend_ += k, p += k, n -= k;
      if (npend_ < sizeof pend_) return;
      bulk_(lanes_.data(), pend_, sizeof pend_);
      npend_ = 0;
    }
    size_t body = n & ~size_t{31};
    if (body) bulk_(lanes_.data(), p, body);
    std::memcpy(pend_, p + body, n - body);
    npend_ = n - body;
  }
  // memcpy(dst, src, n) and update(src, n); with cached, the stores stay in
  // the cache (for readers close behind).
  void copy_update(uint8_t* dst, const uint8_t* src, size_t n, bool cached = false) {
    if (!copy_ || cached) {
      for (size_t o = 0; o < n; o += kBlock) {
        size_t k = std::min(kBlock, n - o);
        update(src + o, k);
        std::memcpy(dst + o, src + o, k);  // src still in cache
      }
      return;
    }
    if (npend_) {
      size_t k = std::min(n, sizeof pend_ - npend_);
      std::memcpy(dst, src, k);
      update(src, k);
      dst += k, src += k, n -= k;
    }
    size_t body = n & ~size_t{31};
    if (body) {
      copy_(lanes_.data(), dst, src, body);
      total_ += body;
    }
    if (n > body) {
      std::memcpy(dst + body, src + body, n - body);
      update(src + body, n - body);
    }
  }
  uint64_t final() const {
    uint64_t h = total_ * P5;
    for (uint64_t l : lanes_) {
      h ^= rotl(l * P2, 31) * P1;
      h = rotl(h, 27) * P1 + P4;
    }
    for (size_t i = 0; i < npend_; ++i) {
      h ^= pend_[i] * P5;
      h = rotl(h, 11) * P1;
    }
    h ^= h >> 33, h *= P2, h ^= h >> 29, h *= P3, h ^= h >> 32;
    return h;
  }

 private:
  Algo algo_;
  BulkFn bulk_;
  CopyFn copy_;
  std::array<uint64_t, 4> lanes_{};
  uint8_t pend_[32];
  size_t npend_ = 0;
  uint64_t total_ = 0;
};

// Checksums of the consecutive chunks of one segment, fed in order. With
// `expected`, each finished chunk is compared and a mismatch throws.
class ChunkSums {
 public:
  ChunkSums(Algo a, size_t chunk, const std::vector<uint64_t>* expected = nullptr,
            std::string what = {})
      : h_(a), chunk_(chunk), expected_(expected), what_(std::move(what)) {}
  void feed(const void* data, size_t n) {
    auto* p = static_cast<const uint8_t*>(data);
    while (n) {
      size_t k = std::min(n, chunk_ - pos_ % chunk_);
      h_.update(p, k);
      pos_ += k, p += k, n -= k;
      if (pos_ % chunk_ == 0) close();
    }
  }
  // Copies n bytes from src to dst, feeding them.
  void copy_feed(void* dst, const void* src, size_t n) {
    auto* d = static_cast<uint8_t*>(dst);
    auto* p = static_cast<const uint8_t*>(src);
    while (n) {
      size_t k = std::min(n, chunk_ - pos_ % chunk_);
      h_.copy_update(d, p, k);
      pos_ += k, d += k, p += k, n -= k;
      if (pos_ % chunk_ == 0) close();
    }
  }
  // Feeds n zero bytes.
  void feed_zeros(size_t n) {
    static const uint8_t zeros[4096] = {};
    for (; n; n -= std::min(n, sizeof zeros)) feed(zeros, std::min(n, sizeof zeros));
  }
  size_t pos() const { return pos_; }
  // Ends the last, partial chunk; returns the sums when writing.
  std::vector<uint64_t> finish() {
    if (pos_ % chunk_) close();
    if (expected_ && index_ != expected_->size()) fail("has the wrong number of chunks");
    return std::move(sums_);
  }

 private:
  void close() {
    uint64_t v = h_.final();
    h_.reset();
    if (expected_) {
      if (index_ >= expected_->size() || (*expected_)[index_] != v)
        fail("chunk " + std::to_string(index_) + " (from byte " + std::to_string(index_ * chunk_) +
             ") does not match its checksum: the shared memory segment was changed or damaged");
    } else {
      sums_.push_back(v);
    }
    ++index_;
  }
  [[noreturn]] void fail(const std::string& s) {
    throw Error(ErrorCode::kInternal, what_ + ": " + s);
  }
  Hasher h_;
  size_t chunk_;
  size_t pos_ = 0;
  size_t index_ = 0;
  const std::vector<uint64_t>* expected_;
  std::string what_;
  std::vector<uint64_t> sums_;
};

uint64_t hash_bytes(const void* p, size_t n) {
  Hasher h(kMul64);
  h.update(static_cast<const uint8_t*>(p), n);
  return h.final();
}

// ---- metadata ----------------------------------------------------------

struct Meta {
  ErrorCode status = ErrorCode::kOk;
  std::string message;  // when status != ok
  uint64_t size = 0;    // segment bytes
  uint64_t chunk = kChunk;
  Algo algo = kMul64;
  uint64_t signature = 0;  // what was packed, so readers can check they agree
  std::string segment;     // shm name, or pool (memfd) name; empty when size == 0
  // A pool (see Pool): its owner's pid and descriptor, so that readers can
  // open /proc/<pid>/fd/<fd>, and the file's identity, which they check.
  uint32_t pooled = 0;
  int64_t pid = 0;
  int32_t fd = -1;
  uint64_t dev = 0, ino = 0;
  // A streamed pool (pooled == 2, see Stream): this call's tag, and where
  // the bytes start (after the header); the sums are in the header instead.
  uint64_t tag = 0, offset = 0;
  std::vector<uint64_t> sums;
};

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_str(std::string& s, const std::string& v) {
  put<uint32_t>(s, static_cast<uint32_t>(v.size()));
  s += v;
}

// Native byte order: the store's readers are on this node.
std::string encode(const Meta& m) {
  std::string s;
  put(s, kMagic);
  put<uint32_t>(s, static_cast<uint32_t>(m.status));
  if (m.status != ErrorCode::kOk) {
    put_str(s, m.message);
    return s;
  }
  put<uint64_t>(s, m.size);
  put<uint64_t>(s, m.chunk);
  put<uint32_t>(s, m.algo);
  put<uint64_t>(s, m.signature);
  put_str(s, m.segment);
  put<uint32_t>(s, m.pooled);
  put<int64_t>(s, m.pid);
  put<int32_t>(s, m.fd);
  put<uint64_t>(s, m.dev);
  put<uint64_t>(s, m.ino);
  put<uint64_t>(s, m.tag);
  put<uint64_t>(s, m.offset);
  put<uint64_t>(s, m.sums.size());
  for (auto v : m.sums) put(s, v);
  return s;
}

class Reader {
 public:
  explicit Reader(const std::string& s) : s_(s) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    auto n = get<uint32_t>();
    need(n);
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  bool at_end() const { return pos_ == s_.size(); }
  void need(uint64_t n) const {
    if (s_.size() - pos_ < n) throw Error(ErrorCode::kInternal, "truncated collective metadata");
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

Meta decode(const std::string& s) {
  Reader r(s);
  Meta m;
  if (r.get<uint32_t>() != kMagic)
    throw Error(ErrorCode::kInternal, "collective metadata has an unknown format");
  m.status = static_cast<ErrorCode>(r.get<uint32_t>());
  if (m.status != ErrorCode::kOk) {
    m.message = r.str();
    return m;
  }
  m.size = r.get<uint64_t>();
  m.chunk = r.get<uint64_t>();
  m.algo = static_cast<Algo>(r.get<uint32_t>());
  m.signature = r.get<uint64_t>();
  m.segment = r.str();
  m.pooled = r.get<uint32_t>();
  m.pid = r.get<int64_t>();
  m.fd = r.get<int32_t>();
  m.dev = r.get<uint64_t>();
  m.ino = r.get<uint64_t>();
  m.tag = r.get<uint64_t>();
  m.offset = r.get<uint64_t>();
  auto n = r.get<uint64_t>();
  if (n > s.size() / 8) throw Error(ErrorCode::kInternal, "truncated collective metadata");
  m.sums.resize(n);
  for (auto& v : m.sums) v = r.get<uint64_t>();
  if (!r.at_end() || m.chunk == 0 || (m.algo != kCrc32c && m.algo != kMul64) ||
      n != (m.pooled == 2 ? 0 : (m.size + m.chunk - 1) / m.chunk) ||
      (m.size && m.segment.empty()) || m.pooled > 2 || (m.pooled && (m.pid <= 0 || m.fd < 0)) ||
      (m.pooled == 2 &&
       (m.offset % kAlign || m.offset < 64 + 8 * ((m.size + m.chunk - 1) / m.chunk))))
    throw Error(ErrorCode::kInternal, "collective metadata is inconsistent");
  return m;
}

// ---- shared memory segments --------------------------------------------

std::string errno_text(int e) {
  return std::strerror(e);
}

// A segment: its creator writes it (and unlinks it when destroyed), readers
// map it. The creator writes with pwrite rather than through a mapping: the
// kernel then skips zeroing the new pages and no page tables are built.
class Segment {
 public:
  Segment() = default;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment() {
    if (base_) ::munmap(base_, size_);
    if (owner_) ::shm_unlink(name_.c_str());
    if (fd_ >= 0) ::close(fd_);
  }

  void create(const std::string& name, size_t size) {
    name_ = name;
    size_ = size;
    int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
      throw Error(ErrorCode::kInternal,
                  "cannot create shared memory segment " + name + ": " + errno_text(errno));
    owner_ = true;
    fd_ = fd;
    if (::ftruncate(fd, static_cast<off_t>(size)) != 0) no_space(errno);
  }

  // Writes n bytes at offset (creator only). Never-written ranges read as 0.
  void write(size_t offset, const void* data, size_t n) {
    auto* p = static_cast<const char*>(data);
    while (n) {
      ssize_t k =
          ::pwrite(fd_, p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) no_space(k < 0 ? errno : ENOSPC);
      p += k, offset += static_cast<size_t>(k), n -= static_cast<size_t>(k);
    }
  }

  void open(const std::string& name, size_t size) {
    name_ = name;
    size_ = size;
    int fd = ::shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
      throw Error(ErrorCode::kInternal,
                  "cannot open shared memory segment " + name + ": " + errno_text(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != size) {
      ::close(fd);
      throw Error(ErrorCode::kInternal, "shared memory segment " + name + " does not have the " +
                                            std::to_string(size) + " bytes announced");
    }
    map(fd);
  }

  const uint8_t* data() const { return static_cast<const uint8_t*>(base_); }
  size_t size() const { return size_; }

 private:
  [[noreturn]] void no_space(int e) {
    throw Error(e == ENOSPC ? ErrorCode::kTooLarge : ErrorCode::kInternal,
                "cannot store " + std::to_string(size_) + " bytes in shared memory segment " +
                    name_ + " (/dev/shm): " + errno_text(e));
  }

  void map(int fd) {
    // Faulted in as read (the kernel maps 16 pages per fault): measured
    // faster than MAP_POPULATE when several readers map one segment at once.
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    int e = errno;
    ::close(fd);
    if (p == MAP_FAILED)
      throw Error(ErrorCode::kInternal,
                  "cannot map shared memory segment " + name_ + ": " + errno_text(e));
    base_ = p;
  }

  std::string name_;
  void* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  bool owner_ = false;
};

// The job id as it may appear in a file name: itself when short and plain,
// else a hash, so names stay well under NAME_MAX.
std::string name_part(const std::string& job) {
  bool plain = !job.empty() && job.size() <= 100 && job[0] != '.' &&
               std::all_of(job.begin(), job.end(), [](unsigned char c) {
                 return std::isalnum(c) || (c && std::strchr("-_.:@+", c));
               });
  if (plain) return job;
  char buf[24];
  std::snprintf(buf, sizeof buf, "h%016llx",
                static_cast<unsigned long long>(hash_bytes(job.data(), job.size())));
  return buf;
}

// Tells apart segments of equal job ids on different daemons of one node.
uint64_t nonce() {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^
                                          (static_cast<uint64_t>(::getpid()) << 32)};
  return rng();
}

// ---- pools: segments kept across broadcasts ------------------------------
//
// A root's pool is a memfd of its own (one per job and rank in a process),
// grown when a broadcast needs more and shrunk when one needs far less, and
// kept mapped: after the first call no pages are allocated, zeroed, faulted
// in or freed. It has no name in /dev/shm, so nothing is left behind when
// the process dies, however it dies. Readers open it as /proc/<pid>/fd/<fd>
// (allowed to a process that may read the root's /proc entries: same uid,
// or CAP_SYS_PTRACE; Yama does not restrict this), check that the link
// names the pool (a random part) and that the file is the announced one,
// and keep it mapped too (one View per job, reader and root).
//
// Reuse is safe because a root writes its pool only when it publishes, and
// it publishes again only after the done barrier of the previous
// collective, which every reader enters only once it has stopped reading.

std::mutex& registry_mutex() {
  static auto* m = new std::mutex;  // never destroyed: exit may race a broadcast
  return *m;
}

class Pool {
 public:
  Pool(const std::string& job, uint32_t rank) {
    char tail[48];
    std::snprintf(tail, sizeof tail, ".r%u.%016llx", rank,
                  static_cast<unsigned long long>(nonce()));
    name_ = "muster.pool." + name_part(job) + tail;
  }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Makes the pool at least size bytes (size > 0) and mapped; throws on failure.
  void reserve(size_t size) {
    const size_t want = (size + kPoolGrain - 1) / kPoolGrain * kPoolGrain;
    if (fd_ < 0) {
      fd_ = ::memfd_create(name_.c_str(), MFD_CLOEXEC);
      struct stat st {};
      if (fd_ < 0 || ::fstat(fd_, &st) != 0) fail("memfd_create", errno);
      dev_ = st.st_dev, ino_ = st.st_ino;
    }
    if (cap_ >= size && cap_ / 4 <= want) return;
    if (base_) ::munmap(base_, cap_);
    base_ = nullptr, cap_ = 0;
    if (::ftruncate(fd_, static_cast<off_t>(want)) != 0) fail("ftruncate", errno);
    // Allocated now, with an error if memory is short, rather than a signal
    // on a later write.
    if (int e = ::posix_fallocate(fd_, 0, static_cast<off_t>(want))) fail("fallocate", e);
    void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
    if (p == MAP_FAILED) fail("mmap", errno);
    base_ = static_cast<uint8_t*>(p), cap_ = want;
  }

  uint8_t* data() const { return base_; }
  const std::string& name() const { return name_; }
  int fd() const { return fd_; }
  uint64_t dev() const { return dev_; }
  uint64_t ino() const { return ino_; }

  // The pool of this process for (job, rank), made on first use.
  static std::shared_ptr<Pool> of(const std::string& job, uint32_t rank) {
    static auto* pools = new std::map<std::string, std::shared_ptr<Pool>>;
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto& p = (*pools)[job + '\0' + std::to_string(rank)];
    if (!p) p = std::make_shared<Pool>(job, rank);
    return p;
  }

 private:
  [[noreturn]] void fail(const char* call, int e) {
    throw Error(
        e == ENOSPC || e == ENOMEM ? ErrorCode::kTooLarge : ErrorCode::kInternal,
        std::string("cannot make broadcast pool ") + name_ + " (" + call + "): " + errno_text(e));
  }

  std::string name_;
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t cap_ = 0;
  uint64_t dev_ = 0, ino_ = 0;
};

std::string pool_path(const Meta& m) {
  return "/proc/" + std::to_string(m.pid) + "/fd/" + std::to_string(m.fd);
}

// Whether m's root still holds its pool open (so, is alive), and this
// process may see it.
bool pool_linked(const Meta& m) {
  char link[512];
  ssize_t k = ::readlink(pool_path(m).c_str(), link, sizeof link);
  return k > 0 &&
         std::string_view(link, static_cast<size_t>(k)) == "/memfd:" + m.segment + " (deleted)";
}

// A reader's mapping of a root's pool.
class View {
 public:
  View() = default;
  View(const View&) = delete;
  View& operator=(const View&) = delete;
  ~View() {
    if (base_) ::munmap(const_cast<uint8_t*>(base_), len_);
    if (fd_ >= 0) ::close(fd_);
  }

  // Makes the pool of m readable; false when this process may not open it
  // (then the bytes come through a segment instead).
  bool attach(const Meta& m) {
    if (fd_ < 0 || name_ != m.segment || dev_ != m.dev || ino_ != m.ino) {
      reset();
      const std::string path = pool_path(m);
      if (!pool_linked(m)) return false;  // not allowed, or another process (another pid namespace)
      int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
      if (fd < 0) return false;
      struct stat st {};
      if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
          static_cast<uint64_t>(st.st_dev) != m.dev || static_cast<uint64_t>(st.st_ino) != m.ino) {
        ::close(fd);
        return false;
      }
      fd_ = fd, name_ = m.segment, dev_ = m.dev, ino_ = m.ino;
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < m.offset + m.size)
      throw Error(ErrorCode::kInternal, "broadcast pool " + m.segment + " is smaller than the " +
                                            std::to_string(m.size) + " bytes announced");
    if (len_ < m.offset + m.size) {
      if (base_) ::munmap(const_cast<uint8_t*>(base_), len_);
      base_ = nullptr, len_ = 0;
      void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd_, 0);
      if (p == MAP_FAILED) return false;
      base_ = static_cast<const uint8_t*>(p), len_ = static_cast<size_t>(st.st_size);
    }
    return true;
  }

  const uint8_t* data() const { return base_; }

  // This process's view, for reader `me` of job, of root's pool.
  static std::shared_ptr<View> of(const std::string& job, uint32_t me, uint32_t root) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto& v = (*views())[key(job, me, root)];
    if (!v) v = std::make_shared<View>();
    return v;
  }
  // Forgets it (after a failure: the root may be gone; its pool need not
  // stay alive through this mapping).
  static void drop(const std::string& job, uint32_t me, uint32_t root) {
    std::lock_guard<std::mutex> lock(registry_mutex());
    views()->erase(key(job, me, root));
  }

 private:
  static std::map<std::string, std::shared_ptr<View>>* views() {
    static auto* v = new std::map<std::string, std::shared_ptr<View>>;
    return v;
  }
  static std::string key(const std::string& job, uint32_t me, uint32_t root) {
    return job + '\0' + std::to_string(me) + '\0' + std::to_string(root);
  }
  void reset() {
    if (base_) ::munmap(const_cast<uint8_t*>(base_), len_);
    if (fd_ >= 0) ::close(fd_);
    base_ = nullptr, len_ = 0, fd_ = -1;
  }

  int fd_ = -1;
  const uint8_t* base_ = nullptr;
  size_t len_ = 0;
  std::string name_;
  uint64_t dev_ = 0, ino_ = 0;
};

// ---- streams: a pool read while it is written ---------------------------
//
// A streamed pool starts with a StreamHeader: this call's tag (random, also
// in the metadata), the number of chunks written so far (a futex word) and
// the chunk checksums, then the bytes at Meta::offset. The root writes the
// header's tag and a zero count before it stores the metadata; after the
// ready barrier it copies chunk by chunk, storing each chunk's checksum and
// then (release) the new count, and wakes the readers waiting on the count
// (FUTEX_WAKE, shared: readers are other processes). Readers copy chunk k
// as soon as the count passes k, checking its checksum; they sleep on the
// count (FUTEX_WAIT) for at most kStreamPoll at a time, then check that the
// root still holds its pool (else it died: they stop, and the done barrier
// reports the dead rank) and that the header still carries their tag.

struct StreamHeader {
  uint64_t tag;
  uint32_t ready;  // chunks written (futex word)
  uint32_t pad;
  uint64_t reserved[6];
  // uint64_t sums[chunks] follow
};
static_assert(sizeof(StreamHeader) == 64);

constexpr auto kStreamPoll = std::chrono::milliseconds(20);
constexpr size_t kStreamBatch = 4;  // readers sleep until this many more chunks are ready

size_t stream_offset(size_t size, size_t chunk) {
  size_t n = (size + chunk - 1) / chunk;
  return (sizeof(StreamHeader) + 8 * n + 4095) / 4096 * 4096;
}

long futex(const uint32_t* word, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, const_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

// Root: copies size bytes of src into the stream at base (header first).
void stream_write(uint8_t* base, size_t offset, const void* src, size_t size, Algo algo,
                  size_t chunk) {
  auto* h = reinterpret_cast<StreamHeader*>(base);
  auto* sums = reinterpret_cast<uint64_t*>(base + sizeof(StreamHeader));
  auto* in = static_cast<const uint8_t*>(src);
  Hasher hs(algo);
  for (size_t k = 0, o = 0; o < size; ++k, o += chunk) {
    size_t n = std::min(chunk, size - o);
    hs.reset();
    hs.copy_update(base + offset + o, in + o, n);
    __atomic_store_n(&sums[k], hs.final(), __ATOMIC_RELAXED);
    __atomic_store_n(&h->ready, static_cast<uint32_t>(k + 1), __ATOMIC_RELEASE);
    if ((k + 1) % kStreamBatch == 0 || o + n == size)
      futex(&h->ready, FUTEX_WAKE, INT_MAX, nullptr);
  }
}

// Reader: copies m.size bytes of the stream at base to dst as the root
// writes them, verifying each chunk. Throws when the root dies, when the
// pool holds another call, on a bad checksum, or after `wait` without
// progress.
void stream_read(const uint8_t* base, const Meta& m, void* dst, std::chrono::milliseconds wait,
                 const std::string& from) {
  auto* h = reinterpret_cast<const StreamHeader*>(base);
  auto* sums = reinterpret_cast<const uint64_t*>(base + sizeof(StreamHeader));
  auto* out = static_cast<uint8_t*>(dst);
  const size_t chunks = (m.size + m.chunk - 1) / m.chunk;
  auto check_tag = [&] {
    if (__atomic_load_n(&h->tag, __ATOMIC_ACQUIRE) != m.tag)
      throw Error(ErrorCode::kInternal,
                  from + ": the root's pool holds another broadcast than the one announced");
  };
  check_tag();
  // Returns the count once it passes k, waiting for a batch of chunks (one
  // wake-up per batch) unless the root is slow.
  auto ready_past = [&](size_t k) {
    const auto want =
        static_cast<uint32_t>(std::min(chunks, (k / kStreamBatch + 1) * kStreamBatch));
    uint32_t r = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE), seen = r;
    auto since = std::chrono::steady_clock::now();
    while (r <= k) {
      timespec ts{0, std::chrono::nanoseconds(kStreamPoll).count()};
      while (r < want && !(futex(&h->ready, FUTEX_WAIT, r, &ts) != 0 && errno == ETIMEDOUT))
        r = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE);  // woken, changed, or a signal
      r = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE);
      if (r >= want) break;
      // A timeout: is the root still there, and still on this call?
      if (!pool_linked(m))
        throw Error(ErrorCode::kPeerExited,
                    from + ": the root stopped writing its pool (it has exited)");
      check_tag();
      const auto now = std::chrono::steady_clock::now();
      if (r != seen)
        seen = r, since = now;
      else if (now - since > wait)
        throw Error(ErrorCode::kTimeout, from + ": no progress from the root within " +
                                             std::to_string(wait.count()) + " ms");
    }
    return r;
  };
  Hasher hs(m.algo);
  for (size_t k = 0; k < chunks; ++k) {
    const uint32_t r = ready_past(k);
    if (r > chunks) throw Error(ErrorCode::kInternal, from + ": the root's pool is inconsistent");
    const size_t o = k * m.chunk, n = std::min<size_t>(m.chunk, m.size - o);
    hs.reset();
    hs.copy_update(out + o, base + m.offset + o, n);
    if (hs.final() != __atomic_load_n(&sums[k], __ATOMIC_RELAXED))
      throw Error(ErrorCode::kInternal,
                  from + ": chunk " + std::to_string(k) + " (from byte " + std::to_string(o) +
                      ") does not match its checksum: the shared memory segment was changed or "
                      "damaged");
  }
  check_tag();  // the bytes were this call's all along
}

// How a broadcast moves its bytes: MUSTER_BCAST=shm forces a fresh segment
// per call, MUSTER_BCAST=pool the root's pool (for any size, written whole
// before readers start), MUSTER_BCAST=stream the root's pool read while it
// is written (any size); by default the stream carries broadcasts of
// kPoolMin bytes or more. Read on each call.
enum class BroadcastPath { kAuto, kSegment, kPool, kStream };
BroadcastPath broadcast_path() {
  const char* e = std::getenv("MUSTER_BCAST");
  if (e && std::string_view(e) == "shm") return BroadcastPath::kSegment;
  if (e && std::string_view(e) == "pool") return BroadcastPath::kPool;
  if (e && std::string_view(e) == "stream") return BroadcastPath::kStream;
  return BroadcastPath::kAuto;
}

// ---- one collective ----------------------------------------------------

struct Part {
  const void* data;
  size_t size;
  size_t offset;  // in the segment; parts in increasing order
};

size_t align_up(size_t v) {
  return (v + kAlign - 1) & ~(kAlign - 1);
}

class Collective {
 public:
  Collective(Client& c, const char* what) : c_(c), info_(c.rank_info()) {
    seq_ = static_cast<uint64_t>(c.add("muster/coll/seq/" + std::to_string(info_.rank), 1));
    prefix_ = "muster/coll/" + std::to_string(info_.generation) + "/" + std::to_string(seq_);
    what_ = std::string(what) + " #" + std::to_string(seq_) + " of job '" + info_.job + "'";
  }
  Collective(const Collective&) = delete;
  Collective& operator=(const Collective&) = delete;
  // The metadata key goes only after a completed collective: after a failure
  // another rank may still have to read it (to learn of the failure), so it
  // stays, a few bytes, until the job ends. The segment goes in any case:
  // every rank reads all metadata before it opens any segment.
  ~Collective() {
    for (const auto& k : finished_) {
      try {
        c_.remove(k);
      } catch (...) {
        // the job, and its store, may be gone already
      }
    }
  }

  const std::string& what() const { return what_; }
  const std::string& job() const { return info_.job; }
  uint32_t rank() const { return info_.rank; }
  uint32_t world() const { return info_.world_size; }

  // Creates this rank's segment of `total` bytes from parts and stores its
  // metadata. A failure is published instead (see fail()) and thrown.
  void publish(const std::vector<Part>& parts, size_t total, uint64_t signature) {
    Meta m;
    try {
      m.size = total;
      m.algo = preferred_algo();
      m.signature = signature;
      if (total) {
        char tail[64];
        std::snprintf(tail, sizeof tail, ".%llu.r%u.%016llx", static_cast<unsigned long long>(seq_),
                      info_.rank, static_cast<unsigned long long>(nonce()));
        m.segment =
            "/muster." + name_part(info_.job) + "." + std::to_string(info_.generation) + tail;
        seg_.create(m.segment, total);
        ChunkSums sums(m.algo, m.chunk);
        for (const auto& p : parts) {
          sums.feed_zeros(p.offset - sums.pos());  // alignment padding
          auto* src = static_cast<const uint8_t*>(p.data);
          for (size_t o = 0; o < p.size; o += kBlock) {
            size_t n = std::min(kBlock, p.size - o);
            sums.feed(src + o, n);
            seg_.write(p.offset + o, src + o, n);  // src still in cache
          }
        }
        sums.feed_zeros(total - sums.pos());
        m.sums = sums.finish();
      }
    } catch (const Error& e) {
      fail(e);
    } catch (const std::exception& e) {
      fail(Error(ErrorCode::kInternal, what_ + ": " + e.what()));
    }
    c_.set(key(info_.rank), encode(m));
    published_ = true;
  }

  // Publishes e instead of a segment and meets the others at the ready
  // barrier (so they read it and throw too, rather than time out); throws e.
  [[noreturn]] void fail(const Error& e) {
    try {
      Meta m;
      m.status = e.code();
      m.message = e.what();
      c_.set(key(info_.rank), encode(m));
      published_ = true;
      ready();
    } catch (...) {
      // e is the error to report
    }
    throw e;
  }

  // Copies size bytes into this rank's pool and stores their metadata, or
  // returns false, publishing nothing, when the pool cannot be had.
  bool publish_pool(const void* data, size_t size, uint64_t signature) {
    Meta m;
    m.size = size;
    m.algo = preferred_algo();
    m.signature = signature;
    try {
      auto pool = Pool::of(info_.job, info_.rank);
      pool->reserve(size);
      ChunkSums sums(m.algo, m.chunk);
      sums.copy_feed(pool->data(), data, size);  // non-temporal stores, checksummed
      m.sums = sums.finish();
      m.segment = pool->name();
      m.pooled = 1;
      m.pid = ::getpid();
      m.fd = pool->fd();
      m.dev = pool->dev();
      m.ino = pool->ino();
    } catch (const std::exception&) {
      return false;
    }
    c_.set(key(info_.rank), encode(m));
    published_ = true;
    return true;
  }

  // Makes this rank's pool a stream for size bytes (see StreamHeader) and
  // stores its metadata; the bytes follow with stream_write after the ready
  // barrier. Returns the pool, or null, publishing nothing, when the pool
  // cannot be had.
  std::shared_ptr<Pool> publish_stream(size_t size, uint64_t signature) {
    Meta m;
    m.size = size;
    m.algo = preferred_algo();
    m.signature = signature;
    m.offset = stream_offset(size, m.chunk);
    m.tag = nonce() | 1;
    std::shared_ptr<Pool> pool;
    try {
      pool = Pool::of(info_.job, info_.rank);
      pool->reserve(m.offset + size);
      auto* h = reinterpret_cast<StreamHeader*>(pool->data());
      __atomic_store_n(&h->ready, 0u, __ATOMIC_RELAXED);
      __atomic_store_n(&h->tag, m.tag, __ATOMIC_RELEASE);
      m.segment = pool->name();
      m.pooled = 2;
      m.pid = ::getpid();
      m.fd = pool->fd();
      m.dev = pool->dev();
      m.ino = pool->ino();
    } catch (const std::exception&) {
      return nullptr;
    }
    c_.set(key(info_.rank), encode(m));
    published_ = true;
    return pool;
  }

  void ready() { c_.barrier(prefix_ + "/ready"); }
  void done() {
    c_.barrier(prefix_ + "/done");
    if (published_) finished_.push_back(key(info_.rank));
    published_ = false;
  }

  // After a pooled round, readers that could not open the pool say so
  // (before the done barrier); after it, every rank asks, and all of them
  // then run a second round through a segment if any reader needs one. The
  // counter goes with the last rank to read it.
  void need_segment() { c_.add(prefix_ + "/need", 1); }
  bool segment_needed() {
    const std::string k = prefix_ + "/need";
    int64_t v = c_.add(k, int64_t{1} << 32);
    if ((v >> 32) == static_cast<int64_t>(info_.world_size)) {
      try {
        c_.remove(k);
      } catch (...) {
      }
    }
    return (v & 0xFFFFFFFF) != 0;
  }
  // Moves on to the second round (keys and barriers of its own).
  void second_round() { prefix_ += "/seg"; }

  // A publisher's metadata; the error it published is thrown here.
  Meta meta(uint32_t r) {
    Meta m = decode(c_.get(key(r)));
    if (m.status != ErrorCode::kOk)
      throw Error(m.status, what_ + " failed on rank " + std::to_string(r) + ": " + m.message);
    return m;
  }

 private:
  std::string key(uint32_t r) const { return prefix_ + "/" + std::to_string(r); }

  Client& c_;
  RankInfo info_;
  uint64_t seq_ = 0;
  std::string prefix_, what_;
  Segment seg_;                        // unlinked when the collective ends, however it ends
  bool published_ = false;             // this round's metadata
  std::vector<std::string> finished_;  // metadata of completed rounds, removed at the end
};

// Runs body, then the done barrier, which every rank that saw good metadata
// enters even when body failed. Body's error is thrown after the barrier,
// unless the barrier reports a dead rank: that explains body's error too
// (a dead root's segment may be gone before this rank opened it).
template <class F>
void read_then_done(Collective& col, F&& body) {
  std::exception_ptr err;
  try {
    body();
  } catch (...) {
    err = std::current_exception();
  }
  if (err) {
    try {
      col.done();
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kPeerExited) throw;
    } catch (...) {
    }
    std::rethrow_exception(err);
  }
  col.done();
}

// Copies a segment range to dst, checksumming the bytes on the way (one
// pass); the gap since the last range is checksummed in place.
void copy_verified(ChunkSums& sums, const Segment& seg, size_t offset, void* dst, size_t size) {
  if (sums.pos() < offset) sums.feed(seg.data() + sums.pos(), offset - sums.pos());
  sums.copy_feed(dst, seg.data() + offset, size);
}

void finish_verified(ChunkSums& sums, const Segment& seg) {
  if (sums.pos() < seg.size()) sums.feed(seg.data() + sums.pos(), seg.size() - sums.pos());
  sums.finish();
}

size_t elem_size(Client::Buffer::Type t) {
  switch (t) {
    case Client::Buffer::Type::kFloat32:
      return 4;
    case Client::Buffer::Type::kFloat64:
      return 8;
    default:
      return 1;
  }
}

// dst[i] = (sum over ranks r, in rank order, of src[r][i]) / n, accumulated
// in double and rounded once, so every rank computes identical bits. src[me]
// may alias dst: each element is read before it is written.
template <class T>
void average_block(const std::vector<const uint8_t*>& src, uint8_t* dst, size_t count,
                   double* acc) {
  for (size_t i = 0; i < count; ++i) {
    T v;
    std::memcpy(&v, src[0] + i * sizeof(T), sizeof(T));
    acc[i] = static_cast<double>(v);
  }
  for (size_t r = 1; r < src.size(); ++r)
    for (size_t i = 0; i < count; ++i) {
      T v;
      std::memcpy(&v, src[r] + i * sizeof(T), sizeof(T));
      acc[i] += static_cast<double>(v);
    }
  const double n = static_cast<double>(src.size());
  for (size_t i = 0; i < count; ++i) {
    T v = static_cast<T>(acc[i] / n);
    std::memcpy(dst + i * sizeof(T), &v, sizeof(T));
  }
}

}  // namespace

void Client::broadcast(void* data, size_t size, uint32_t root) {
  const auto& info = rank_info();
  if (root >= info.world_size)
    throw Error(ErrorCode::kInvalidArgument, "broadcast root " + std::to_string(root) +
                                                 " is outside the job's world size " +
                                                 std::to_string(info.world_size));
  if (info.world_size == 1) {
    if (!data && size) throw Error(ErrorCode::kInvalidArgument, "broadcast data is NULL");
    return;
  }
  // Local errors go through the collective, so the other ranks learn of
  // them instead of waiting for a timeout.
  Collective col(*this, "broadcast");
  std::optional<Error> local;
  if (!data && size)
    local = Error(ErrorCode::kInvalidArgument,
                  col.what() + ": data is NULL on rank " + std::to_string(col.rank()));
  if (col.rank() == root) {
    if (local) col.fail(*local);
    const BroadcastPath path = broadcast_path();
    std::shared_ptr<Pool> stream;
    if (size &&
        (path == BroadcastPath::kStream || (path == BroadcastPath::kAuto && size >= kPoolMin)))
      stream = col.publish_stream(size, size);
    const bool pooled =
        stream || (size && path == BroadcastPath::kPool && col.publish_pool(data, size, size));
    if (!pooled) col.publish({{data, size, 0}}, size, size);
    col.ready();
    if (stream)
      stream_write(stream->data(), stream_offset(size, kChunk), data, size, preferred_algo(),
                   kChunk);
    col.done();
    if (pooled && col.segment_needed()) {
      col.second_round();
      col.publish({{data, size, 0}}, size, size);
      col.ready();
      col.done();
    }
    return;
  }
  col.ready();
  Meta m = col.meta(root);
  const std::string from = col.what() + " from rank " + std::to_string(root);
  auto check = [&] {
    if (local) throw *local;
    if (m.size != size)
      throw Error(ErrorCode::kInvalidArgument,
                  col.what() + ": this rank's buffer has " + std::to_string(size) +
                      " bytes, root " + std::to_string(root) + "'s " + std::to_string(m.size));
  };
  auto from_segment = [&](const Meta& sm) {
    if (!size) return;
    if (sm.size != size) throw Error(ErrorCode::kInternal, from + ": the segment has another size");
    Segment seg;
    seg.open(sm.segment, sm.size);
    ChunkSums sums(sm.algo, sm.chunk, &sm.sums, from);
    copy_verified(sums, seg, 0, data, size);
    finish_verified(sums, seg);
  };
  if (!m.pooled) {
    read_then_done(col, [&] {
      check();
      from_segment(m);
    });
    return;
  }
  // From root's pool; a reader that may not open it says so, and then every
  // rank takes part in a second round through a segment (see Collective).
  try {
    bool need = false;
    std::exception_ptr err;
    try {
      check();
      auto view = View::of(col.job(), col.rank(), root);
      if (!view->attach(m)) {
        need = true;
        col.need_segment();
      } else if (m.pooled == 2) {
        stream_read(view->data(), m, data, std::chrono::milliseconds(impl_->wait_ms(std::nullopt)),
                    from);
      } else {
        ChunkSums sums(m.algo, m.chunk, &m.sums, from);
        sums.copy_feed(data, view->data(), size);
        sums.finish();
      }
    } catch (...) {
      err = std::current_exception();
    }
    try {
      col.done();
    } catch (const Error& e) {
      if (err && e.code() != ErrorCode::kPeerExited) std::rethrow_exception(err);
      throw;
    }
    // Past the done barrier, every rank asks whether a second round follows.
    if (col.segment_needed()) {
      col.second_round();
      col.ready();
      Meta sm = col.meta(root);
      read_then_done(col, [&] {
        if (need) from_segment(sm);
      });
    }
    if (err) std::rethrow_exception(err);
  } catch (...) {
    View::drop(col.job(), col.rank(), root);  // root may be gone: let its pool go
    throw;
  }
}

void Client::sync_model(const std::vector<Buffer>& buffers, bool reduce_parameters,
                        bool reduce_buffers) {
  const auto& info = rank_info();
  // Each buffer is taken from rank 0 (packed first, in rank 0's segment only)
  // or averaged (packed after that, in every rank's segment).
  std::vector<size_t> from_root, averaged;
  std::optional<Error> local;  // reported through the collective, see broadcast()
  for (size_t i = 0; i < buffers.size(); ++i) {
    const auto& b = buffers[i];
    bool avg =
        b.type != Buffer::Type::kBytes && (b.is_parameter ? reduce_parameters : reduce_buffers);
    if (!local && !b.data && b.size)
      local = Error(ErrorCode::kInvalidArgument, "sync_model buffer " + std::to_string(i) +
                                                     " has NULL data on rank " +
                                                     std::to_string(info.rank));
    if (!local && avg && b.size % elem_size(b.type))
      local = Error(ErrorCode::kInvalidArgument,
                    "sync_model buffer " + std::to_string(i) + " has " + std::to_string(b.size) +
                        " bytes, not a whole number of " + std::to_string(elem_size(b.type)) +
                        "-byte floats");
    (avg ? averaged : from_root).push_back(i);
  }
  if (info.world_size == 1) {
    if (local) throw *local;
    return;
  }

  // The layout, and a signature of it so that ranks can check they agree.
  std::vector<size_t> offset(buffers.size());
  size_t root_bytes = 0, avg_bytes = 0;
  Hasher sh(kMul64);
  auto sig_add = [&](uint64_t v) { sh.update(reinterpret_cast<const uint8_t*>(&v), 8); };
  for (size_t i : from_root) {
    offset[i] = root_bytes;
    root_bytes = align_up(root_bytes + buffers[i].size);
    sig_add(i), sig_add(buffers[i].size), sig_add(0);
  }
  for (size_t i : averaged) {
    offset[i] = avg_bytes;
    avg_bytes = align_up(avg_bytes + buffers[i].size);
    sig_add(i), sig_add(buffers[i].size), sig_add(1 + static_cast<uint64_t>(buffers[i].type));
  }
  const uint64_t sig = sh.final();
  const bool reduce = !averaged.empty();

  Collective col(*this, "sync_model");
  const uint32_t me = col.rank(), n = col.world();
  auto publishes = [&](uint32_t r) { return r == 0 || reduce; };
  auto avg_base = [&](uint32_t r) { return r == 0 ? root_bytes : 0; };
  auto seg_size = [&](uint32_t r) { return avg_base(r) + (reduce ? avg_bytes : 0); };

  if (publishes(me)) {
    if (local) col.fail(*local);
    std::vector<Part> parts;
    if (me == 0)
      for (size_t i : from_root) parts.push_back({buffers[i].data, buffers[i].size, offset[i]});
    if (reduce)
      for (size_t i : averaged)
        parts.push_back({buffers[i].data, buffers[i].size, avg_base(me) + offset[i]});
    col.publish(parts, seg_size(me), sig);
  }
  col.ready();
  // Every rank reads every publisher's metadata, so all agree on errors.
  std::vector<Meta> metas(n);
  for (uint32_t r = 0; r < n; ++r)
    if (r != me && publishes(r)) metas[r] = col.meta(r);

  read_then_done(col, [&] {
    if (local) throw *local;
    std::vector<std::unique_ptr<Segment>> segs(n);
    std::vector<std::unique_ptr<ChunkSums>> sums(n);
    for (uint32_t r = 0; r < n; ++r) {
      if (r == me || !publishes(r)) continue;
      const Meta& m = metas[r];
      if (m.signature != sig || m.size != seg_size(r))
        throw Error(ErrorCode::kInvalidArgument,
                    col.what() + ": rank " + std::to_string(r) +
                        " passed other buffers (sizes, types, order or reduce flags) than rank " +
                        std::to_string(me));
      if (!m.size) continue;
      segs[r] = std::make_unique<Segment>();
      segs[r]->open(m.segment, m.size);
      sums[r] = std::make_unique<ChunkSums>(m.algo, m.chunk, &m.sums,
                                            col.what() + " from rank " + std::to_string(r));
    }
    // Segments are read front to back, so the checksums run in order.
    if (me != 0 && segs[0])
      for (size_t i : from_root)
        copy_verified(*sums[0], *segs[0], offset[i], buffers[i].data, buffers[i].size);
    if (reduce) {
      std::vector<double> acc(kReduceBlock / 4);
      std::vector<const uint8_t*> src(n);
      for (size_t i : averaged) {
        const auto& b = buffers[i];
        auto* d = static_cast<uint8_t*>(b.data);
        for (size_t o = 0; o < b.size; o += kReduceBlock) {
          size_t len = std::min(kReduceBlock, b.size - o);
          for (uint32_t r = 0; r < n; ++r) {
            if (r == me) {
              src[r] = d + o;  // this rank's own values: its buffer, as published
              continue;
            }
            size_t at = avg_base(r) + offset[i] + o;
            auto& s = *sums[r];
            if (s.pos() < at) s.feed(segs[r]->data() + s.pos(), at - s.pos());
            s.feed(segs[r]->data() + at, len);
            src[r] = segs[r]->data() + at;
          }
          if (elem_size(b.type) == 4)
            average_block<float>(src, d + o, len / 4, acc.data());
          else
            average_block<double>(src, d + o, len / 8, acc.data());
        }
      }
    }
    for (uint32_t r = 0; r < n; ++r)
      if (segs[r]) finish_verified(*sums[r], *segs[r]);
  });
}

}  // namespace muster
