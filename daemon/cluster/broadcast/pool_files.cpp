// The broadcast pools of local ranks (see cluster/broadcast/pool_files.hpp).
#include "cluster/broadcast/pool_files.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include "muster/error.hpp"

namespace muster::daemon {

namespace {

// libmuster's pools: memfd_create("muster.pool.<job>.r<rank>.<nonce>").
constexpr std::string_view kPoolLink = "/memfd:muster.pool.";

std::string text(int e) {
  return std::strerror(e);
}

// Closes a descriptor when it goes out of scope, unless released.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() { return std::exchange(fd, -1); }
};

std::string self_fd(int fd) {
  return "/proc/self/fd/" + std::to_string(fd);
}

// Holes: a page the daemon reads or writes in a hole of a memfd is
// allocated then, and charged to the daemon's memory, not the rank's (a
// sealed pool of 512 MiB that is all hole cost 512 MiB of root's shared
// memory). libmuster allocates its pools whole (posix_fallocate), and
// tmpfs counts those pages in st_blocks even before they are written,
// where SEEK_HOLE and mincore call them holes; so a pool with fewer
// blocks than its size has a hole somewhere, and is refused. Asked at
// each broadcast's open: a hole punched during a broadcast still costs
// the daemon at most that broadcast's bytes (a known limit).
void refuse_holes(const std::string& what, const struct stat& st) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  const uint64_t size = (static_cast<uint64_t>(st.st_size) + page - 1) / page * page;
  const uint64_t allocated = static_cast<uint64_t>(st.st_blocks) * 512;
  if (allocated < size)
    throw Error(ErrorCode::kInvalidArgument,
                what + " has " + std::to_string(size - allocated) + " of its " +
                    std::to_string(size) +
                    " bytes unallocated (holes): a pool must be allocated whole, as libmuster's "
                    "are (posix_fallocate); the daemon does not allocate a rank's memory for it");
}

}  // namespace

std::shared_ptr<PoolFile> PoolFiles::open(int64_t pid, int64_t uid, const proto::PoolRef& ref,
                                          uint64_t end, bool write) {
  const std::string path =
      "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(ref.fd.value_or(-1));
  const std::string what = "the rank's broadcast pool (" + path + ")";
  if (pid <= 0 || uid < 0 || !ref.set())
    throw Error(ErrorCode::kPermissionDenied,
                "a broadcast pool is opened only for a local process that names one");
  auto now = Clock::now();
  auto it = std::find_if(open_.begin(), open_.end(), [&](const Entry& e) {
    return e.pid == pid && e.uid == uid && e.fd == *ref.fd && e.dev == ref.dev &&
           e.ino == ref.ino && e.write == write;
  });
  // Kept from before: still what that process holds as that fd (not a
  // reused pid's, nor a file the process let go of). stat(2) follows the
  // link without opening the file.
  struct stat now_st {};
  if (it != open_.end() &&
      (::stat(path.c_str(), &now_st) != 0 || static_cast<uint64_t>(now_st.st_dev) != ref.dev ||
       static_cast<uint64_t>(now_st.st_ino) != ref.ino)) {
    open_.erase(it);
    it = open_.end();
  }
  std::shared_ptr<PoolFile> file;
  if (it != open_.end()) {
    it->used = now;
    file = it->file;
  } else {
    std::erase_if(live_, [](const std::weak_ptr<PoolFile>& w) { return w.expired(); });
    if (live_.size() >= kMaxLive)
      throw Error(ErrorCode::kUnavailable, "this daemon has " + std::to_string(live_.size()) +
                                               " broadcast pools open already; try again");
    // Not opened yet: what the process holds as that fd, without opening it.
    Fd at{::open(path.c_str(), O_PATH | O_CLOEXEC)};
    if (at.fd < 0)
      throw Error(ErrorCode::kPermissionDenied, "cannot reach " + what + ": " + text(errno));
    struct stat st {};
    char link[256];
    ssize_t k = ::readlink(self_fd(at.fd).c_str(), link, sizeof link);
    if (::fstat(at.fd, &st) != 0 || !S_ISREG(st.st_mode) || k <= 0 ||
        std::string_view(link, static_cast<size_t>(k)).substr(0, kPoolLink.size()) != kPoolLink)
      throw Error(ErrorCode::kPermissionDenied, what + " is not a broadcast pool of libmuster");
    if (static_cast<uint64_t>(st.st_dev) != ref.dev || static_cast<uint64_t>(st.st_ino) != ref.ino)
      throw Error(ErrorCode::kPermissionDenied, what + " is another file than the one announced");
    if (static_cast<int64_t>(st.st_uid) != uid)
      throw Error(ErrorCode::kPermissionDenied,
                  what + " belongs to uid " + std::to_string(st.st_uid) + ", not the rank's");
    // Opened through the descriptor just checked: the same file, whatever
    // the process does with its fd meanwhile.
    Fd f{::open(self_fd(at.fd).c_str(), (write ? O_RDWR : O_RDONLY) | O_CLOEXEC | O_NOCTTY)};
    if (f.fd < 0)
      throw Error(ErrorCode::kPermissionDenied, "cannot open " + what + ": " + text(errno));
    // A memfd (shared memory: F_GET_SEALS works on nothing else), not a
    // file of some file system a user mounted under a memfd's name. (Asked
    // only now: fcntl does not answer it on an O_PATH descriptor. The open
    // of a regular file has no side effects.)
    const int seals = ::fcntl(f.fd, F_GET_SEALS);
    if (seals < 0) throw Error(ErrorCode::kPermissionDenied, what + " is not in shared memory");
    file = std::make_shared<PoolFile>();
    file->fd = f.release();
    file->what = what;
    file->sealed = (seals & F_SEAL_SHRINK) != 0;
    file->writable = write;
    if (open_.size() >= kMaxOpen)
      open_.erase(std::min_element(open_.begin(), open_.end(),
                                   [](const Entry& a, const Entry& b) { return a.used < b.used; }));
    open_.push_back({file, pid, uid, *ref.fd, ref.dev, ref.ino, write, now});
    live_.push_back(file);
  }
  struct stat st {};
  if (::fstat(file->fd, &st) != 0 || static_cast<uint64_t>(st.st_size) < end)
    throw Error(ErrorCode::kInvalidArgument, what + " has " + std::to_string(st.st_size) +
                                                 " bytes; the broadcast needs " +
                                                 std::to_string(end));
  refuse_holes(what, st);
  // Sealed: its size never goes below what it is now, so what the
  // broadcast needs of it may be mapped. (Not mapped: pread and pwrite.)
  if (file->sealed && file->mapped < end) file->map_to(end);
  return file;
}

void PoolFiles::expire(Clock::time_point now) {
  std::erase_if(open_, [&](const Entry& e) { return now - e.used > kIdle; });
}

}  // namespace muster::daemon
