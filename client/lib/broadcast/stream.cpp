// Streams of a broadcast (see stream.hpp).
#include "stream.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>

#include "muster/error.hpp"
#include "pool.hpp"
#include "shm.hpp"

namespace muster::bcast {
namespace {

constexpr auto kStreamPoll = std::chrono::milliseconds(20);
constexpr auto kStallCheck = std::chrono::milliseconds(100);  // ring writer: ask the daemon

long futex(const uint32_t* word, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, const_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

size_t chunks_of(const Meta& m) {
  return (m.size + m.chunk - 1) / m.chunk;
}

uint64_t* progress_of(uint8_t* base, size_t chunks) {
  return reinterpret_cast<uint64_t*>(base + sizeof(StreamHeader) + 8 * chunks);
}

// Where chunk k's bytes are.
size_t slot_at(const Meta& m, size_t k) {
  return m.offset + (m.ring ? k % m.ring : k) * m.chunk;
}

// The fewest chunks any reader has copied (kGone for one that stopped).
uint64_t slowest(const uint64_t* progress, uint32_t readers, uint32_t writer) {
  uint64_t lo = kGone;
  for (uint32_t r = 0; r < readers; ++r)
    if (r != writer) lo = std::min(lo, __atomic_load_n(&progress[r], __ATOMIC_SEQ_CST));
  return lo;
}

}  // namespace

size_t stream_offset(size_t size, size_t chunk, uint32_t readers) {
  size_t n = (size + chunk - 1) / chunk;
  return (sizeof(StreamHeader) + 8 * n + 8 * size_t{readers} + 4095) / 4096 * 4096;
}

void stream_publish(uint8_t* base, size_t k, uint64_t sum, bool last) {
  auto* h = reinterpret_cast<StreamHeader*>(base);
  auto* sums = reinterpret_cast<uint64_t*>(base + sizeof(StreamHeader));
  __atomic_store_n(&sums[k], sum, __ATOMIC_RELAXED);
  __atomic_store_n(&h->ready, static_cast<uint32_t>(k + 1), __ATOMIC_RELEASE);
  if ((k + 1) % kStreamBatch == 0 || last) futex(&h->ready, FUTEX_WAKE, INT_MAX, nullptr);
}

void stream_abort(uint8_t* base, uint64_t tag) {
  auto* h = reinterpret_cast<StreamHeader*>(base);
  __atomic_store_n(&h->aborted, tag, __ATOMIC_RELEASE);
  futex(&h->ready, FUTEX_WAKE, INT_MAX, nullptr);
}

void stream_fallback(uint8_t* base, uint64_t tag) {
  auto* h = reinterpret_cast<StreamHeader*>(base);
  __atomic_store_n(&h->fallback, tag, __ATOMIC_RELEASE);
  futex(&h->ready, FUTEX_WAKE, INT_MAX, nullptr);
}

void stream_write(uint8_t* base, const Meta& m, const Layout& src, uint32_t writer,
                  std::chrono::milliseconds wait, const std::function<void()>& stalled,
                  const std::string& what) {
  auto* h = reinterpret_cast<StreamHeader*>(base);
  const size_t chunks = chunks_of(m);
  const uint64_t* progress = progress_of(base, chunks);
  Hasher hs(m.algo);
  for (size_t k = 0; k < chunks; ++k) {
    // Slot k % ring held chunk k - ring: every reader must be past it. The
    // writer then waits for a batch of free slots, not one at a time.
    const uint64_t need = m.ring && k >= m.ring ? k - m.ring + 1 : 0;
    uint64_t lo = need ? slowest(progress, m.readers, writer) : kGone;
    if (lo < need) {
      const uint64_t want = std::min<uint64_t>(need + kStreamBatch - 1, k);
      auto since = std::chrono::steady_clock::now(), checked = since;
      uint64_t seen = lo;
      while (lo < want) {
        const uint32_t f = __atomic_load_n(&h->freed, __ATOMIC_SEQ_CST);
        __atomic_store_n(&h->waiting, 1u, __ATOMIC_SEQ_CST);
        lo = slowest(progress, m.readers, writer);  // after `waiting`: no wake-up is lost
        if (lo >= want) break;
        timespec ts{0, std::chrono::nanoseconds(kStreamPoll).count()};
        futex(&h->freed, FUTEX_WAIT, f, &ts);
        lo = slowest(progress, m.readers, writer);
        const auto now = std::chrono::steady_clock::now();
        if (lo != seen) {
          seen = lo, since = checked = now;
        } else if (now - checked >= kStallCheck) {
          checked = now;
          stalled();
        }
        if (lo >= need && now - since >= kStreamPoll) break;  // a slow reader: take one slot
        if (now - since > wait)
          throw Error(ErrorCode::kTimeout, what +
                                               ": a reader copied nothing from the ring within " +
                                               std::to_string(wait.count()) + " ms");
      }
      __atomic_store_n(&h->waiting, 0u, __ATOMIC_RELAXED);
    }
    const size_t o = k * m.chunk, n = std::min<size_t>(m.chunk, m.size - o);
    hs.reset();
    // A ring's slots stay in the cache for the readers; a whole pool cannot.
    src.copy_in(o, n, base + slot_at(m, k), hs, m.ring != 0);
    stream_publish(base, k, hs.final(), k + 1 == chunks);
  }
}

namespace {
void check_tag(const StreamHeader* h, const Meta& m, const std::string& from) {
  if (__atomic_load_n(&h->tag, __ATOMIC_ACQUIRE) != m.tag)
    throw Error(ErrorCode::kInternal,
                from + ": the root's pool holds another broadcast than the one announced");
}
}  // namespace

// Returns the count once it passes k, waiting for a batch of chunks (one
// wake-up per batch) unless the root is slow.
uint32_t stream_wait(const uint8_t* base, const Meta& m, size_t k, std::chrono::milliseconds wait,
                     const std::string& from) {
  auto* h = reinterpret_cast<const StreamHeader*>(base);
  const size_t chunks = (m.size + m.chunk - 1) / m.chunk;
  const auto want = static_cast<uint32_t>(std::min(chunks, (k / kStreamBatch + 1) * kStreamBatch));
  uint32_t r = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE), seen = r;
  auto since = std::chrono::steady_clock::now();
  while (r <= k) {
    timespec ts{0, std::chrono::nanoseconds(kStreamPoll).count()};
    while (r < want && __atomic_load_n(&h->aborted, __ATOMIC_ACQUIRE) != m.tag &&
           __atomic_load_n(&h->fallback, __ATOMIC_ACQUIRE) != m.tag) {
      bool timed_out = futex(&h->ready, FUTEX_WAIT, r, &ts) != 0 && errno == ETIMEDOUT;
      r = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE);  // woken, changed, or a signal
      if (timed_out) break;
    }
    r = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE);
    if (r >= want) break;
    // Stopped, or a timeout: is the root still there, and still on this call?
    if (__atomic_load_n(&h->fallback, __ATOMIC_ACQUIRE) == m.tag) throw StreamFallback{};
    if (__atomic_load_n(&h->aborted, __ATOMIC_ACQUIRE) == m.tag)
      throw Error(ErrorCode::kPeerExited,
                  from + ": the rank writing this node's copy stopped (it reports why)");
    if (!pool_linked(m))
      throw Error(ErrorCode::kPeerExited,
                  from + ": the root stopped writing its pool (it has exited)");
    check_tag(h, m, from);
    const auto now = std::chrono::steady_clock::now();
    if (r != seen)
      seen = r, since = now;
    else if (now - since > wait)
      throw Error(ErrorCode::kTimeout, from + ": no progress from the root within " +
                                           std::to_string(wait.count()) + " ms");
  }
  return r;
}

void ring_report(uint8_t* base, const Meta& m, uint32_t reader, uint64_t done) {
  if (!m.ring || reader >= m.readers) return;
  auto* h = reinterpret_cast<StreamHeader*>(base);
  const size_t chunks = chunks_of(m);
  __atomic_store_n(progress_of(base, chunks) + reader, done, __ATOMIC_SEQ_CST);
  __atomic_add_fetch(&h->freed, 1u, __ATOMIC_SEQ_CST);
  // The writer waits for a batch of slots: wake it once a batch is free.
  if ((done % kStreamBatch == 0 || done >= chunks) &&
      __atomic_load_n(&h->waiting, __ATOMIC_SEQ_CST))
    futex(&h->freed, FUTEX_WAKE, INT_MAX, nullptr);
}

bool stream_read(uint8_t* base, const Meta& m, const Layout& dst, uint32_t reader,
                 std::chrono::milliseconds wait, const std::string& from) {
  auto* h = reinterpret_cast<StreamHeader*>(base);
  auto* sums = reinterpret_cast<const uint64_t*>(base + sizeof(StreamHeader));
  const size_t chunks = chunks_of(m);
  if (m.ring && reader >= m.readers)
    throw Error(ErrorCode::kInternal, from + ": the root's ring has no place for rank " +
                                          std::to_string(reader) + "'s progress");
  auto report = [&](uint64_t done) { ring_report(base, m, reader, done); };
  try {
    check_tag(h, m, from);
    Hasher hs(m.algo);
    for (size_t k = 0; k < chunks; ++k) {
      const uint32_t r = stream_wait(base, m, k, wait, from);
      if (r > chunks) throw Error(ErrorCode::kInternal, from + ": the root's pool is inconsistent");
      const size_t o = k * m.chunk, n = std::min<size_t>(m.chunk, m.size - o);
      hs.reset();
      dst.scatter(o, base + slot_at(m, k), n, &hs);
      if (hs.final() != __atomic_load_n(&sums[k], __ATOMIC_RELAXED))
        throw Error(ErrorCode::kInternal,
                    from + ": chunk " + std::to_string(k) + " (from byte " + std::to_string(o) +
                        ") does not match its checksum: the shared memory segment was changed "
                        "or damaged");
      report(k + 1);
    }
    check_tag(h, m, from);  // the bytes were this call's all along
    return true;
  } catch (const StreamFallback&) {
    report(kGone);
    return false;
  } catch (...) {
    report(kGone);  // the writer no longer waits for this reader
    throw;
  }
}

std::shared_ptr<Pool> stream_open(const std::string& job, uint32_t rank, Meta& m) {
  m.tag = nonce() | 1;
  auto pool = Pool::of(job, rank);
  pool->reserve(pool_span(m));
  auto* h = reinterpret_cast<StreamHeader*>(pool->data());
  __atomic_store_n(&h->ready, 0u, __ATOMIC_RELAXED);
  __atomic_store_n(&h->waiting, 0u, __ATOMIC_RELAXED);
  if (m.ring) std::memset(h + 1, 0, m.offset - sizeof *h);  // sums and progress
  __atomic_store_n(&h->tag, m.tag, __ATOMIC_RELEASE);
  describe(m, *pool, Pooled::kStream);
  return pool;
}

}  // namespace muster::bcast
