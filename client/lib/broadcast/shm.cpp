// Shared memory segments of a broadcast (see shm.hpp).
#include "shm.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

#include "checksum.hpp"
#include "muster/error.hpp"
#include "shm/segment_names.hpp"

namespace muster::bcast {

std::string errno_text(int e) {
  return std::strerror(e);
}

Segment::~Segment() {
  if (base_) ::munmap(base_, size_);
  if (owner_) ::shm_unlink(name_.c_str());
  if (fd_ >= 0) ::close(fd_);
}

void Segment::create(const std::string& name, size_t size) {
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

void Segment::write(size_t offset, const void* data, size_t n) {
  auto* p = static_cast<const char*>(data);
  while (n) {
    ssize_t k = ::pwrite(fd_, p, std::min<size_t>(n, size_t{1} << 30), static_cast<off_t>(offset));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) no_space(k < 0 ? errno : ENOSPC);
    p += k, offset += static_cast<size_t>(k), n -= static_cast<size_t>(k);
  }
}

void Segment::open(const std::string& name, size_t size) {
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

void Segment::no_space(int e) {
  throw Error(e == ENOSPC ? ErrorCode::kTooLarge : ErrorCode::kInternal,
              "cannot store " + std::to_string(size_) + " bytes in shared memory segment " + name_ +
                  " (/dev/shm): " + errno_text(e));
}

void Segment::map(int fd) {
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

std::string name_part(const std::string& job) {
  return shm::job_part(job);
}

uint64_t nonce() {
  static thread_local std::mt19937_64 rng{std::random_device{}() ^
                                          (static_cast<uint64_t>(::getpid()) << 32)};
  return rng();
}

}  // namespace muster::bcast
