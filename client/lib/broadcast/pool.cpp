// Pools of a broadcast (see pool.hpp).
#include "pool.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <mutex>
#include <string_view>

#include "muster/error.hpp"
#include "shm.hpp"

namespace muster::bcast {
namespace {

constexpr size_t kPoolGrain = size_t{2} << 20;  // pool sizes are multiples of this

std::mutex& registry_mutex() {
  static auto* m = new std::mutex;  // never destroyed: exit may race a broadcast
  return *m;
}

std::string pool_path(const Meta& m) {
  return "/proc/" + std::to_string(m.pid) + "/fd/" + std::to_string(m.fd);
}

}  // namespace

Pool::Pool(const std::string& job, uint32_t rank) {
  char tail[48];
  std::snprintf(tail, sizeof tail, ".r%u.%016llx", rank, static_cast<unsigned long long>(nonce()));
  name_ = "muster.pool." + name_part(job) + tail;
}

void Pool::reserve(size_t size) {
  const size_t want = (size + kPoolGrain - 1) / kPoolGrain * kPoolGrain;
  if (fd_ >= 0 && cap_ >= size && cap_ / 4 <= want) return;
  if (base_) ::munmap(base_, cap_);
  base_ = nullptr, cap_ = 0;
  // Sealed against shrinking, so that a daemon may map it (a file that
  // shrinks under a mapping raises SIGBUS in the daemon's copy, or EFAULT in
  // its send: see daemon/cluster/pool_files.hpp). A pool to shrink is made
  // anew, with another inode, which readers see in the next Meta.
  if (fd_ >= 0 && want < file_) {
    ::close(fd_);
    fd_ = -1, file_ = 0;
  }
  if (fd_ < 0) {
    fd_ = ::memfd_create(name_.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
    struct stat st {};
    if (fd_ < 0 || ::fstat(fd_, &st) != 0) fail("memfd_create", errno);
    dev_ = st.st_dev, ino_ = st.st_ino;
  }
  if (::ftruncate(fd_, static_cast<off_t>(want)) != 0) fail("ftruncate", errno);
  file_ = want;
  if (::fcntl(fd_, F_ADD_SEALS, F_SEAL_SHRINK) != 0) fail("F_ADD_SEALS", errno);
  // Allocated now, with an error if memory is short, rather than a signal
  // on a later write.
  if (int e = ::posix_fallocate(fd_, 0, static_cast<off_t>(want))) fail("fallocate", e);
  void* p = ::mmap(nullptr, want, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd_, 0);
  if (p == MAP_FAILED) fail("mmap", errno);
  base_ = static_cast<uint8_t*>(p), cap_ = want;
}

std::shared_ptr<Pool> Pool::of(const std::string& job, uint32_t rank) {
  static auto* pools = new std::map<std::string, std::shared_ptr<Pool>>;
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& p = (*pools)[job + '\0' + std::to_string(rank)];
  if (!p) p = std::make_shared<Pool>(job, rank);
  return p;
}

void Pool::fail(const char* call, int e) {
  throw Error(
      e == ENOSPC || e == ENOMEM ? ErrorCode::kTooLarge : ErrorCode::kInternal,
      std::string("cannot make broadcast pool ") + name_ + " (" + call + "): " + errno_text(e));
}

bool pool_linked(const Meta& m) {
  char link[512];
  ssize_t k = ::readlink(pool_path(m).c_str(), link, sizeof link);
  return k > 0 &&
         std::string_view(link, static_cast<size_t>(k)) == "/memfd:" + m.segment + " (deleted)";
}

View::~View() {
  if (base_) ::munmap(base_, len_);
  if (fd_ >= 0) ::close(fd_);
}

bool View::attach(const Meta& m) {
  if (fd_ < 0 || name_ != m.segment || dev_ != m.dev || ino_ != m.ino) {
    reset();
    const std::string path = pool_path(m);
    if (!pool_linked(m)) return false;  // not allowed, or another process (another pid namespace)
    // Read-write: a ring's readers report their progress in its header.
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
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
  if (::fstat(fd_, &st) != 0 || static_cast<uint64_t>(st.st_size) < pool_span(m))
    throw Error(ErrorCode::kInternal, "broadcast pool " + m.segment + " is smaller than the " +
                                          std::to_string(m.size) + " bytes announced");
  if (len_ < pool_span(m) || len_ != static_cast<size_t>(st.st_size)) {
    if (base_) ::munmap(base_, len_);
    base_ = nullptr, len_ = 0;
    void* p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED,
                     fd_, 0);
    if (p == MAP_FAILED) return false;
    base_ = static_cast<uint8_t*>(p), len_ = static_cast<size_t>(st.st_size);
  }
  return true;
}

std::shared_ptr<View> View::of(const std::string& job, uint32_t me, uint32_t root) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& v = (*views())[key(job, me, root)];
  if (!v) v = std::make_shared<View>();
  return v;
}

void View::drop(const std::string& job, uint32_t me, uint32_t root) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  views()->erase(key(job, me, root));
}

std::map<std::string, std::shared_ptr<View>>* View::views() {
  static auto* v = new std::map<std::string, std::shared_ptr<View>>;
  return v;
}

std::string View::key(const std::string& job, uint32_t me, uint32_t root) {
  return job + '\0' + std::to_string(me) + '\0' + std::to_string(root);
}

void View::reset() {
  if (base_) ::munmap(base_, len_);
  if (fd_ >= 0) ::close(fd_);
  base_ = nullptr, len_ = 0, fd_ = -1;
}

void describe(Meta& m, const Pool& pool, Pooled pooled) {
  m.segment = pool.name();
  m.pooled = pooled;
  m.pid = ::getpid();
  m.fd = pool.fd();
  m.dev = pool.dev();
  m.ino = pool.ino();
}

}  // namespace muster::bcast
