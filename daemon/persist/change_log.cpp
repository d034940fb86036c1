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

// One record inside a commit: u32 length of the payload, u8 type, payload.
void put_record(std::string& out, uint8_t type, std::string_view payload) {
  put_u32(out, static_cast<uint32_t>(payload.size()));
  out.push_back(static_cast<char>(type));
  out.append(payload);
}

// One commit on disk: u32 length, u32 CRC-32C, the records. A commit is the
// unit a torn write loses: a round's records apply all together or not at
// all (a lease moved from one job to another in one round must never load
// as held by both).
void put_frame(std::string& out, std::string_view records) {
  put_u32(out, static_cast<uint32_t>(records.size()));
  put_u32(out, ChangeLog::crc32c(records));
  out.append(records);
}

// The records of one commit; false when they do not parse (a bug: the
// checksum held).
bool each_record(std::string_view records,
                 const std::function<void(uint8_t, std::string_view)>& f) {
  while (!records.empty()) {
    if (records.size() < 5) return false;
    uint32_t len = get_u32(records.data());
    if (records.size() - 5 < len) return false;
    f(static_cast<uint8_t>(records[4]), records.substr(5, len));
    records.remove_prefix(5 + len);
  }
  return true;
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

ChangeLog::ChangeLog(files::Dir dir) : dir_(std::move(dir)), path_(dir_.shown(kFileName)) {}

ChangeLog::~ChangeLog() {
  close();
}

void ChangeLog::close() {
  if (fd_ >= 0) dir_.env->close(fd_);
  fd_ = -1;
}

bool ChangeLog::start(uint64_t epoch, std::string* why) {
  std::string head, first;
  put_record(head, 0, header(epoch));
  put_frame(first, head);
  if (!files::write_durably(dir_, kFileName, first, why)) return false;
  int fd =
      dir_.env->openat(dir_.fd, dir_.at(kFileName).c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0);
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
  Env& env = *dir_.env;
  int fd = env.openat(dir_.fd, dir_.at(kFileName).c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0);
  struct stat st;
  // Cut only a torn tail: truncating to the same length would also give
  // back the room reserved past the end (tmpfs does).
  bool cut = fd >= 0 && env.fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) > end;
  if (fd < 0 ||
      (cut && (env.ftruncate(fd, static_cast<off_t>(end)) != 0 || env.fdatasync(fd) != 0))) {
    *why = "cannot reopen " + path_ + ": " + std::strerror(errno);
    if (fd >= 0) env.close(fd);
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
  uint64_t need = end_ + kRecordHead + buffer_.size() + claimed_ + n;
  if (need > allocated_) {
    // A chunk ahead when the disk allows, else just what is needed.
    for (uint64_t want : {std::max(need, allocated_ + kChunk), need}) {
      // Only the range past what is reserved: on tmpfs, reserving from 0
      // walks every page of the log again, which made each save cost the
      // log's size (found by bench_swarm's profile).
      if (dir_.env->fallocate(fd_, FALLOC_FL_KEEP_SIZE, static_cast<off_t>(allocated_),
                              static_cast<off_t>(want - allocated_)) == 0) {
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
  put_record(buffer_, type, payload);
}

bool ChangeLog::commit(std::string* why) {
  claimed_ = 0;
  if (buffer_.empty()) return true;
  if (fd_ < 0 || broken_) {
    *why = "the change log is not open";
    return false;
  }
  std::string frame;
  put_frame(frame, buffer_);
  size_t done = 0;
  while (done < frame.size()) {
    ssize_t w = dir_.env->pwrite(fd_, frame.data() + done, frame.size() - done,
                                 static_cast<off_t>(end_ + done));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *why = "cannot write " + path_ + ": " + std::strerror(w < 0 ? errno : ENOSPC);
      // Back to the last durable end: a half-written commit must not sit
      // in front of the next try's. (This also gives back space reserved
      // past the end.) The records stay buffered for that try.
      if (dir_.env->ftruncate(fd_, static_cast<off_t>(end_)) != 0) broken_ = true;
      allocated_ = end_;
      return false;
    }
    done += static_cast<size_t>(w);
  }
  if (dir_.env->fdatasync(fd_) != 0) {
    // After a failed sync the page cache may have dropped the data while a
    // later sync reports success: trust this file no more.
    *why = "cannot sync " + path_ + ": " + std::strerror(errno);
    broken_ = true;
    return false;
  }
  end_ += frame.size();
  allocated_ = std::max(allocated_, end_);
  buffer_.clear();
  return true;
}

bool ChangeLog::replay(const files::Dir& dir, uint64_t epoch,
                       const std::function<void(uint8_t, std::string_view)>& f, uint64_t* end,
                       bool* torn) {
  *torn = false;
  std::string bytes;
  if (!files::read_all(dir, kFileName, bytes)) return false;
  size_t at = 0;
  bool first = true;
  while (at < bytes.size()) {
    if (bytes.size() - at < kRecordHead) break;
    uint32_t len = get_u32(bytes.data() + at);
    uint32_t sum = get_u32(bytes.data() + at + 4);
    if (len == 0 || len > kMaxRecord || bytes.size() - at - kRecordHead < len) break;
    std::string_view records(bytes.data() + at + kRecordHead, len);
    if (crc32c(records) != sum) break;
    if (first) {
      // The first commit holds the header alone: the epoch it follows.
      bool ours = false;
      each_record(records, [&](uint8_t type, std::string_view payload) {
        ours = type == 0 && payload == header(epoch);
      });
      if (!ours) return false;  // another epoch's, or not a log
      first = false;
    } else if (!each_record(records, f)) {
      break;
    }
    at += kRecordHead + len;
  }
  if (first) return false;
  *end = at;
  *torn = at < bytes.size();
  return true;
}

}  // namespace muster::daemon
