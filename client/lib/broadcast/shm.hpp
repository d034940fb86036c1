// Shared memory segments of a broadcast (see broadcast.cpp): a publishing
// rank creates one (/dev/shm/muster.<job>.<generation>.<seq>.r<rank>.p<pid>.
// <nonce>, common/shm/segment_names.hpp) and copies its bytes in; readers
// map it. Segments are unlinked by their creator on every path (RAII); a
// SIGKILLed creator's are removed by the surviving ranks that see it die
// (remove_orphans) and by the daemon when the job ends.
//
// Speed (256 MiB): the creator writes with pwrite (no zeroing of the new
// pages, no page tables), checksumming each block just before the kernel
// copies it from cache; readers map the segment and copy with one fused
// pass (AVX2 non-temporal stores + checksum lanes) at memcpy speed. Not
// installed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

std::string errno_text(int e);

// A base of the classes that own a mapping and its descriptor: never copied.
class NoCopy {
 protected:
  NoCopy() = default;
  NoCopy(const NoCopy&) = delete;
  NoCopy& operator=(const NoCopy&) = delete;
};

// A segment: its creator writes it (and unlinks it when destroyed), readers
// map it. The creator writes with pwrite rather than through a mapping: the
// kernel then skips zeroing the new pages and no page tables are built.
class Segment : NoCopy {
 public:
  ~Segment();

  void create(const std::string& name, size_t size);

  // Writes n bytes at offset (creator only). Never-written ranges read as 0.
  void write(size_t offset, const void* data, size_t n);

  void open(const std::string& name, size_t size);

  const uint8_t* data() const { return static_cast<const uint8_t*>(base_); }
  size_t size() const { return size_; }

 private:
  [[noreturn]] void no_space(int e);

  void map(int fd);

  std::string name_;
  void* base_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
  bool owner_ = false;
};

// The job id as it may appear in a file name: itself when short and plain,
// else a hash, so names stay well under NAME_MAX.
std::string name_part(const std::string& job);

// Tells apart segments of equal job ids on different daemons of one node.
uint64_t nonce();

}  // namespace muster::bcast
#pragma GCC visibility pop
