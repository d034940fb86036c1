#include "server/accept_guard.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <mutex>

namespace muster::daemon {

namespace {

std::mutex g_mu;  // libzmq may accept on more than one I/O thread
int g_spare = -1;
std::atomic<bool> g_armed{false};
std::atomic<uint64_t> g_shed{0};

int sys_accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return static_cast<int>(::syscall(SYS_accept4, fd, addr, len, flags));
}

// At the limit: give the spare's slot to the waiting connection, close it,
// take the slot back. Without a spare (the daemon's own thread took the
// freed slot first) the listener is told to try again later: libzmq polls
// again, and the fd guard's pause ends the spinning.
int shed(int fd) {
  std::lock_guard lock(g_mu);
  if (g_spare < 0) g_spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (g_spare >= 0) {
    ::close(g_spare);
    int s = sys_accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (s >= 0) {
      ::close(s);
      g_shed.fetch_add(1, std::memory_order_relaxed);
    }
    g_spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  errno = ECONNABORTED;
  return -1;
}

int guarded_accept(int fd, sockaddr* addr, socklen_t* len, int flags) {
  int s = sys_accept4(fd, addr, len, flags);
  if (s >= 0 || errno != EMFILE || !g_armed.load()) return s;
  return shed(fd);
}

}  // namespace

void arm_accept_guard() {
  std::lock_guard lock(g_mu);
  if (g_spare < 0) g_spare = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  g_armed = true;
}

uint64_t accept_guard_shed() {
  return g_shed.load(std::memory_order_relaxed);
}

}  // namespace muster::daemon

// What libzmq's listeners call (see the header). Defined in the executable,
// they come before libc's in the dynamic linker's search.
extern "C" int accept4(int fd, sockaddr* addr, socklen_t* len, int flags) {
  return muster::daemon::guarded_accept(fd, addr, len, flags);
}

extern "C" int accept(int fd, sockaddr* addr, socklen_t* len) {
  return muster::daemon::guarded_accept(fd, addr, len, 0);
}
