// The bytes of a rank's broadcast pool: through a mapping when the pool is
// sealed against shrinking, else pread and pwrite (see
// cluster/broadcast/pool_files.hpp).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "cluster/broadcast/guarded_copy.hpp"
#include "cluster/broadcast/pool_files.hpp"
#include "muster/error.hpp"

#ifndef MADV_POPULATE_READ  // Linux 5.14; older kernels answer EINVAL
#define MADV_POPULATE_READ 22
#define MADV_POPULATE_WRITE 23
#endif

namespace muster::daemon {

namespace {

const size_t kPage = static_cast<size_t>(::sysconf(_SC_PAGESIZE));

size_t pages(size_t n) {
  return (n + kPage - 1) / kPage * kPage;
}

constexpr size_t kGranule = size_t{2} << 20;  // of PoolFile::warm

// The bytes of pools this daemon has mapped (files and spans), and how many
// it may: twice the machine's memory. A broadcast's bytes are in memory (the
// rank's pool holds them), so only a sparse file asks for more, and the
// daemon's address space is not a rank's to use up (64 pools of a TiB
// each). Past it, pread and pwrite. Spans are freed on libzmq's thread too.
std::atomic<uint64_t> g_mapped{0};
uint64_t g_budget = 0;  // 0: not set yet

uint64_t budget() {
  if (!g_budget)
    g_budget = 2 * static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(kPage);
  return g_budget;
}

bool take(uint64_t n) {
  uint64_t now = g_mapped.load();
  do {
    if (now + n > budget()) return false;
  } while (!g_mapped.compare_exchange_weak(now, now + n));
  return true;
}

Error faulted(const std::string& what, uint64_t at, size_t n) {
  return Error(ErrorCode::kInternal, "a page of " + what + " (bytes " + std::to_string(at) + ".." +
                                         std::to_string(at + n) +
                                         ") could not be had (SIGBUS): memory is short, or the " +
                                         "rank punched a hole in it");
}

}  // namespace

// A span of map_chunk: an anonymous page, then the file's pages.
struct PoolFile::Span {
  char* base = nullptr;
  size_t len = 0;
  Span() = default;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() {
    if (!base) return;
    ::munmap(base, len);
    g_mapped -= len;
  }
};

void set_pool_map_budget(uint64_t bytes) {
  g_budget = bytes;
}

PoolFile::~PoolFile() {
  if (map) {
    ::munmap(map, mapped);
    g_mapped -= mapped;
  }
  if (fd >= 0) ::close(fd);
}

bool PoolFile::map_to(uint64_t size) {
  size = pages(size);
  if (!sealed || size <= mapped) return sealed && map;
  if (!take(size)) return false;
  void* p = ::mmap(nullptr, size, PROT_READ | (writable ? PROT_WRITE : 0), MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {  // address space: pread and pwrite still work
    g_mapped -= size;
    return false;
  }
  if (map) {
    ::munmap(map, mapped);
    g_mapped -= mapped;
  }
  map = static_cast<char*>(p), mapped = size;
  warm.assign((size + kGranule - 1) / kGranule, false);
  return true;
}

// The page tables filled at once rather than a fault a page in the copy (a
// 4 MiB chunk is 1,024 of them); later the pages stay mapped. Best effort:
// a page the rank took away meanwhile faults in the guarded copy.
void PoolFile::warm_up(uint64_t at, size_t n, bool write) const {
  const size_t first = at / kGranule, last = (at + n + kGranule - 1) / kGranule;
  if (std::all_of(warm.begin() + first, warm.begin() + last, [](bool w) { return w; })) return;
  const size_t from = first * kGranule, to = std::min(last * kGranule, mapped);
  ::madvise(map + from, to - from, write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ);
  std::fill(warm.begin() + first, warm.begin() + last, true);
}

void PoolFile::read(uint64_t at, char* dst, size_t n) const {
  if (map && at + n <= mapped) {
    warm_up(at, n, false);
    if (!guarded_copy(dst, map + at, n)) throw faulted(what, at, n);
    return;
  }
  while (n) {
    ssize_t k = ::pread(fd, dst, n, static_cast<off_t>(at));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0)
      throw Error(ErrorCode::kInternal, "cannot read " + what + ": " + std::strerror(errno));
    if (k == 0)
      throw Error(ErrorCode::kInvalidArgument,
                  what + " ends at byte " + std::to_string(at) + ", before the chunk it names");
    dst += k, at += static_cast<uint64_t>(k), n -= static_cast<size_t>(k);
  }
}

void PoolFile::write(uint64_t at, const char* src, size_t n) const {
  if (map && at + n <= mapped) {
    warm_up(at, n, true);
    if (!guarded_copy(map + at, src, n)) throw faulted(what, at, n);
    return;
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < at + n)
    throw Error(ErrorCode::kInvalidArgument, what + " ends before chunk bytes " +
                                                 std::to_string(at) + ".." +
                                                 std::to_string(at + n) + " (it was shrunk)");
  while (n) {
    ssize_t k = ::pwrite(fd, src, n, static_cast<off_t>(at));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0)
      throw Error(errno == ENOSPC || errno == ENOMEM ? ErrorCode::kTooLarge : ErrorCode::kInternal,
                  "cannot write " + what + ": " + std::strerror(k < 0 ? errno : EIO));
    src += k, at += static_cast<uint64_t>(k), n -= static_cast<size_t>(k);
  }
}

namespace {

// A span for the file's bytes [at, at + span), its pages present, or null.
std::shared_ptr<PoolFile::Span> new_span(const PoolFile& f, uint64_t at, size_t span) {
  auto s = std::make_shared<PoolFile::Span>();
  if (!take(kPage + span)) return nullptr;
  void* p =
      ::mmap(nullptr, kPage + span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    g_mapped -= kPage + span;
    return nullptr;
  }
  s->base = static_cast<char*>(p), s->len = kPage + span;
  // In place of the anonymous pages after the first: the file's.
  if (::mmap(s->base + kPage, span, PROT_READ, MAP_SHARED | MAP_FIXED, f.fd,
             static_cast<off_t>(at)) == MAP_FAILED)
    return nullptr;
  // Present now, or not at all: the kernel reads them in the send, where a
  // page it cannot have is an EFAULT that libzmq does not survive. (A rank
  // that punches a hole later can still cause one, where memory is too
  // short to give the page again: a known limit.)
  if (::madvise(s->base + kPage, span, MADV_POPULATE_READ) != 0) return nullptr;
  return s;
}

}  // namespace

std::optional<MappedChunk> map_chunk(const PoolFile& f, std::string_view head, uint64_t at,
                                     size_t n) {
  // The file's pages [at, at + span) exist for good: it is sealed against
  // shrinking and was that long when mapped.
  const size_t span = pages(n);
  if (!f.map || at % kPage || head.size() > kPage || at + span > f.mapped) return std::nullopt;
  // The span of the chunk at this place in an earlier broadcast, unless a
  // frame of it is still out (then one of its own, not kept).
  auto& kept = f.spans[{at, span}];
  std::shared_ptr<PoolFile::Span> s = kept && kept.use_count() == 1 ? kept : new_span(f, at, span);
  if (!s) return std::nullopt;
  if (!kept) kept = s;
  char* frame = s->base + kPage - head.size();
  std::memcpy(frame, head.data(), head.size());
  return MappedChunk{std::move(s), std::string_view(frame, head.size() + n)};
}

}  // namespace muster::daemon
