// Streams of a broadcast (see broadcast_stream.hpp).
#include "broadcast_stream.hpp"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <ctime>

#include "broadcast_pool.hpp"
#include "muster/error.hpp"

namespace muster::bcast {
namespace {

constexpr auto kStreamPoll = std::chrono::milliseconds(20);
constexpr size_t kStreamBatch = 4;  // readers sleep until this many more chunks are ready

long futex(const uint32_t* word, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, const_cast<uint32_t*>(word), op, val, ts, nullptr, 0);
}

}  // namespace

size_t stream_offset(size_t size, size_t chunk) {
  size_t n = (size + chunk - 1) / chunk;
  return (sizeof(StreamHeader) + 8 * n + 4095) / 4096 * 4096;
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

void stream_write(uint8_t* base, size_t offset, const void* src, size_t size, Algo algo,
                  size_t chunk) {
  auto* in = static_cast<const uint8_t*>(src);
  Hasher hs(algo);
  for (size_t k = 0, o = 0; o < size; ++k, o += chunk) {
    size_t n = std::min(chunk, size - o);
    hs.reset();
    hs.copy_update(base + offset + o, in + o, n);
    stream_publish(base, k, hs.final(), o + n == size);
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
    while (r < want && __atomic_load_n(&h->aborted, __ATOMIC_ACQUIRE) != m.tag) {
      bool timed_out = futex(&h->ready, FUTEX_WAIT, r, &ts) != 0 && errno == ETIMEDOUT;
      r = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE);  // woken, changed, or a signal
      if (timed_out) break;
    }
    r = __atomic_load_n(&h->ready, __ATOMIC_ACQUIRE);
    if (r >= want) break;
    // Stopped, or a timeout: is the root still there, and still on this call?
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

void stream_read(const uint8_t* base, const Meta& m, void* dst, std::chrono::milliseconds wait,
                 const std::string& from) {
  auto* h = reinterpret_cast<const StreamHeader*>(base);
  auto* sums = reinterpret_cast<const uint64_t*>(base + sizeof(StreamHeader));
  auto* out = static_cast<uint8_t*>(dst);
  const size_t chunks = (m.size + m.chunk - 1) / m.chunk;
  check_tag(h, m, from);
  Hasher hs(m.algo);
  for (size_t k = 0; k < chunks; ++k) {
    const uint32_t r = stream_wait(base, m, k, wait, from);
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
  check_tag(h, m, from);  // the bytes were this call's all along
}

}  // namespace muster::bcast
