#include "persist/change_log.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

#include "log.hpp"
#include "persist/files.hpp"

namespace muster::daemon {

namespace {

constexpr const char* kMagic = "musterd-log";
constexpr size_t kRecordHead = 8;          // length, checksum
constexpr uint64_t kChunk = 4ull << 20;    // reserved at a time when the disk allows
constexpr uint32_t kMaxRecord = 1u << 30;  // a length beyond this is a torn header

void put_u32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

uint32_t get_u32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

std::string header(uint64_t epoch) {
  std::string payload = kMagic;
  payload.push_back('\0');
  for (int i = 0; i < 8; ++i) payload.push_back(static_cast<char>((epoch >> (8 * i)) & 0xff));
  return payload;
}

void frame(std::string& out, uint8_t type, std::string_view payload) {
  std::string body(1, static_cast<char>(type));
  body.append(payload);
  put_u32(out, static_cast<uint32_t>(body.size()));
  put_u32(out, ChangeLog::crc32c(body));
  out.append(body);
}

}  // namespace

uint32_t ChangeLog::crc32c(std::string_view bytes) {
  // Castagnoli, reflected, table-driven: fast enough for a log of changes
  // and no library to link.
  static const auto table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  uint32_t c = ~0u;
  for (unsigned char b : bytes) c = table[(c ^ b) & 0xff] ^ (c >> 8);
  return ~c;
}

ChangeLog::ChangeLog(std::string dir) : dir_(std::move(dir)), path_(dir_ + "/" + kFileName) {}

ChangeLog::~ChangeLog() {
  close();
}

void ChangeLog::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool ChangeLog::start(uint64_t epoch, std::string* why) {
  std::string first;
  frame(first, 0, header(epoch));
  std::string tmp = path_ + ".tmp";
  if (!files::write_durably(dir_, tmp, path_, first, why)) return false;
  int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) {
    *why = "cannot open " + path_ + ": " + std::strerror(errno);
    return false;
  }
  close();
  fd_ = fd;
  end_ = allocated_ = first.size();
  claimed_ = 0;
  buffer_.clear();
  broken_ = false;
  return true;
}

bool ChangeLog::resume(uint64_t end, std::string* why) {
  int fd = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
  struct stat st;
  // Cut only a torn tail: truncating to the same length would also give
  // back the room reserved past the end (tmpfs does).
  bool cut = fd >= 0 && ::fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > end;
  if (fd < 0 || (cut && (::ftruncate(fd, static_cast<off_t>(end)) != 0 || ::fdatasync(fd) != 0))) {
    *why = "cannot reopen " + path_ + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd);
    return false;
  }
  close();
  fd_ = fd;
  end_ = allocated_ = end;
  claimed_ = 0;
  buffer_.clear();
  broken_ = false;
  return true;
}

bool ChangeLog::reserve(size_t n, std::string* why) {
  if (fd_ < 0 || broken_) {
    // No usable log: the next save is a snapshot, which needs its own room;
    // claim nothing here and let that save say whether the disk has it.
    return true;
  }
  uint64_t need = end_ + buffer_.size() + claimed_ + n;
  if (need > allocated_) {
    // A chunk ahead when the disk allows, else just what is needed.
    for (uint64_t want : {std::max(need, allocated_ + kChunk), need}) {
      if (::fallocate(fd_, FALLOC_FL_KEEP_SIZE, 0, static_cast<off_t>(want)) == 0) {
        allocated_ = want;
        break;
      }
      if (errno == EOPNOTSUPP || errno == ENOSYS) {
        // A filesystem that cannot reserve: writes may still fail, and then
        // the replies wait for a save that works (StateFile::save).
        allocated_ = need;
        break;
      }
      if (want == need) {
        *why = std::strerror(errno);
        return false;
      }
    }
  }
  claimed_ += n;
  return true;
}

void ChangeLog::append(uint8_t type, std::string_view payload) {
  frame(buffer_, type, payload);
}

bool ChangeLog::commit(std::string* why) {
  claimed_ = 0;
  if (buffer_.empty()) return true;
  if (fd_ < 0 || broken_) {
    *why = "the change log is not open";
    return false;
  }
  size_t done = 0;
  while (done < buffer_.size()) {
    ssize_t w = ::pwrite(fd_, buffer_.data() + done, buffer_.size() - done,
                         static_cast<off_t>(end_ + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *why = "cannot write " + path_ + ": " + std::strerror(w < 0 ? errno : ENOSPC);
      // Back to the last durable end: a half-written record must not sit
      // in front of the next try's records. (This also gives back space
      // reserved past the end.)
      if (::ftruncate(fd_, static_cast<off_t>(end_)) != 0) broken_ = true;
      allocated_ = end_;
      return false;
    }
    done += static_cast<size_t>(w);
  }
  if (::fdatasync(fd_) != 0) {
    // After a failed sync the page cache may have dropped the data while a
    // later sync reports success: trust this file no more.
    *why = "cannot sync " + path_ + ": " + std::strerror(errno);
    broken_ = true;
    return false;
  }
  end_ += buffer_.size();
  allocated_ = std::max(allocated_, end_);
  buffer_.clear();
  return true;
}

bool ChangeLog::replay(const std::string& dir, uint64_t epoch,
                       const std::function<void(uint8_t, std::string_view)>& f, uint64_t* end,
                       bool* torn) {
  *torn = false;
  std::string bytes;
  if (!files::read_all(dir + "/" + kFileName, bytes)) return false;
  size_t at = 0;
  bool first = true;
  while (at < bytes.size()) {
    if (bytes.size() - at < kRecordHead) break;
    uint32_t len = get_u32(bytes.data() + at);
    uint32_t sum = get_u32(bytes.data() + at + 4);
    if (len == 0 || len > kMaxRecord || bytes.size() - at - kRecordHead < len) break;
    std::string_view body(bytes.data() + at + kRecordHead, len);
    if (crc32c(body) != sum) break;
    uint8_t type = static_cast<uint8_t>(body[0]);
    body.remove_prefix(1);
    if (first) {
      if (type != 0 || body != header(epoch)) return false;  // another epoch's
      first = false;
    } else {
      f(type, body);
    }
    at += kRecordHead + len;
  }
  if (first) return false;
  *end = at;
  *torn = at < bytes.size();
  return true;
}

}  // namespace muster::daemon
