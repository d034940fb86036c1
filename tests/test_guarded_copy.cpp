// The daemon's copies to and from a rank's mapped pool (daemon/cluster/
// guarded_copy.cpp): a SIGBUS in one fails that copy, and the daemon goes
// on; a SIGBUS anywhere else still ends the process, as it did before.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <cstring>
#include <string>

#include "cluster/broadcast/guarded_copy.hpp"

using namespace muster::daemon;

namespace {

// A mapping of 4 pages of a memfd that is then shrunk to one: the last
// three raise SIGBUS when touched.
struct Shrunk {
  int fd = -1;
  char* p = nullptr;
  static constexpr size_t kLen = 4 * 4096;
  Shrunk() {
    fd = ::memfd_create("guarded-copy-test", MFD_CLOEXEC);
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, kLen) == 0);
    void* m = ::mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(m != MAP_FAILED);
    p = static_cast<char*>(m);
    std::memset(p, 'a', kLen);
    REQUIRE(::ftruncate(fd, 4096) == 0);
  }
  ~Shrunk() {
    ::munmap(p, kLen);
    ::close(fd);
  }
};

}  // namespace

TEST_CASE("a SIGBUS in a guarded copy fails the copy, and the next copies work", "[pool]") {
  Shrunk s;
  std::string out(8192, 'x');
  CHECK(guarded_copy(out.data(), s.p, 4096));  // the page that is still there
  CHECK(out.substr(0, 4096) == std::string(4096, 'a'));
  for (int i = 0; i < 3; ++i) {  // from past the end, and into it
    CHECK_FALSE(guarded_copy(out.data(), s.p + 4096, 8192));
    CHECK_FALSE(guarded_copy(s.p + 8192, out.data(), 4096));
  }
  // The signal is not left blocked, nor the guard armed: a plain copy, then
  // a guarded one that faults again.
  sigset_t now;
  REQUIRE(pthread_sigmask(SIG_BLOCK, nullptr, &now) == 0);
  CHECK_FALSE(sigismember(&now, SIGBUS));
  CHECK(guarded_copy(out.data(), s.p, 10));
  CHECK_FALSE(guarded_copy(out.data(), s.p + 3 * 4096, 1));
}

TEST_CASE("a SIGBUS outside a guarded copy still ends the process", "[pool]") {
  Shrunk s;
  std::string out(16, 'x');
  CHECK_FALSE(guarded_copy(out.data(), s.p + 4096, 16));  // the handler is in place
  pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::signal(SIGABRT, SIG_DFL);  // not Catch's report of a sanitizer's abort, in this copy of it
    volatile char c = s.p[2 * 4096];  // not guarded
    (void)c;
    ::_exit(0);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  // Killed by it; or, under AddressSanitizer, whose handler was there
  // before, ended with its report (an abort, or its exit code).
  if (WIFSIGNALED(status))
    CHECK((WTERMSIG(status) == SIGBUS || WTERMSIG(status) == SIGABRT));
  else
    CHECK((WIFEXITED(status) && WEXITSTATUS(status) != 0));
}
