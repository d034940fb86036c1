// Copies that a SIGBUS fails instead of killing the daemon (see
// cluster/guarded_copy.hpp).
#include "cluster/guarded_copy.hpp"

#include <atomic>
#include <csetjmp>
#include <csignal>
#include <cstring>
#include <mutex>

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
  std::memcpy(dst, src, n);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_escape = nullptr;
  return true;
}

}  // namespace muster::daemon
