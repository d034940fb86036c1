// Copies that a SIGBUS fails instead of killing the daemon (see
// cluster/broadcast/guarded_copy.hpp).
#include "cluster/broadcast/guarded_copy.hpp"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <mutex>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace muster::daemon {

namespace {

thread_local sigjmp_buf* t_escape = nullptr;  // set while this thread copies
struct sigaction g_before {};                 // SIGBUS's handler before ours

void on_sigbus(int sig, siginfo_t* info, void* context) {
  if (sigjmp_buf* e = t_escape) {
    t_escape = nullptr;
    siglongjmp(*e, 1);
  }
  // Not ours: the handler there was before (a sanitizer's), or the default
  // action, which the faulting instruction meets again when this returns.
  if ((g_before.sa_flags & SA_SIGINFO) && g_before.sa_sigaction)
    return g_before.sa_sigaction(sig, info, context);
  if (g_before.sa_handler != SIG_DFL && g_before.sa_handler != SIG_IGN && g_before.sa_handler)
    return g_before.sa_handler(sig);
  ::signal(SIGBUS, SIG_DFL);
}

// memcpy with stores that bypass the cache: the bytes are read next by
// other processes (the ranks of a pool) or by the kernel's send, not by this
// thread, and a plain store reads each line from memory before it writes it
// (4 % of a 4-node broadcast's time on loopback, measured). SSE2: every
// x86-64 has it.
void stream_copy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  auto* d = static_cast<char*>(dst);
  auto* s = static_cast<const char*>(src);
  if (n < 1024) {
    std::memcpy(d, s, n);
    return;
  }
  const size_t head = (16 - reinterpret_cast<uintptr_t>(d) % 16) % 16;
  std::memcpy(d, s, head);
  d += head, s += head, n -= head;
  const size_t body = n / 64 * 64;
  for (size_t i = 0; i < body; i += 64)
    for (size_t k = 0; k < 64; k += 16)
      _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + k),
                       _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + k)));
  _mm_sfence();  // before the copy is reported done: the stores are weakly ordered
  std::memcpy(d + body, s + body, n - body);
#else
  std::memcpy(dst, src, n);
#endif
}

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGBUS, &sa, &g_before);
  });
}

}  // namespace

bool guarded_copy(void* dst, const void* src, size_t n) {
  install();
  sigjmp_buf escape;
  // 1: the signal mask is restored by siglongjmp (SIGBUS is blocked while
  // the handler runs).
  if (sigsetjmp(escape, 1)) return false;
  // The fences keep the compiler from dropping or moving the stores around
  // the copy (only this thread's signal handler reads them).
  t_escape = &escape;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  stream_copy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_escape = nullptr;
  return true;
}

}  // namespace muster::daemon
