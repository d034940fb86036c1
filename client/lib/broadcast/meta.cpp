// Encoding of a broadcast's metadata (see meta.hpp).
#include "meta.hpp"

#include <algorithm>
#include <cstring>

namespace muster::bcast {
namespace {

constexpr uint32_t kMagic = 0x3442534d;  // "MSB4"
constexpr uint32_t kMaxRing = 1 << 16, kMaxReaders = 1 << 20;

template <class T>
void put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}
void put_str(std::string& s, const std::string& v) {
  put<uint32_t>(s, static_cast<uint32_t>(v.size()));
  s += v;
}

class MetaReader {
 public:
  explicit MetaReader(const std::string& s) : s_(s) {}
  template <class T>
  T get() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, s_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    auto n = get<uint32_t>();
    need(n);
    std::string v = s_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  bool at_end() const { return pos_ == s_.size(); }
  void need(uint64_t n) const {
    if (s_.size() - pos_ < n) throw Error(ErrorCode::kInternal, "truncated collective metadata");
  }

 private:
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace

std::string encode(const Meta& m) {
  std::string s;
  put(s, kMagic);
  put<uint32_t>(s, static_cast<uint32_t>(m.status));
  if (m.status != ErrorCode::kOk) {
    put_str(s, m.message);
    return s;
  }
  put<uint64_t>(s, m.size);
  put<uint64_t>(s, m.chunk);
  put<uint32_t>(s, m.algo);
  put<uint64_t>(s, m.signature);
  put_str(s, m.segment);
  put<uint32_t>(s, static_cast<uint32_t>(m.pooled));
  put<int64_t>(s, m.pid);
  put<int32_t>(s, m.fd);
  put<uint64_t>(s, m.dev);
  put<uint64_t>(s, m.ino);
  put<uint64_t>(s, m.tag);
  put<uint64_t>(s, m.offset);
  put<uint32_t>(s, m.ring);
  put<uint32_t>(s, m.readers);
  put<uint64_t>(s, m.sums.size());
  for (auto v : m.sums) put(s, v);
  return s;
}

Meta decode(const std::string& s) {
  MetaReader r(s);
  Meta m;
  if (r.get<uint32_t>() != kMagic)
    throw Error(ErrorCode::kInternal, "collective metadata has an unknown format");
  m.status = static_cast<ErrorCode>(r.get<uint32_t>());
  if (m.status != ErrorCode::kOk) {
    m.message = r.str();
    return m;
  }
  m.size = r.get<uint64_t>();
  m.chunk = r.get<uint64_t>();
  m.algo = static_cast<Algo>(r.get<uint32_t>());
  m.signature = r.get<uint64_t>();
  m.segment = r.str();
  m.pooled = static_cast<Pooled>(r.get<uint32_t>());
  m.pid = r.get<int64_t>();
  m.fd = r.get<int32_t>();
  m.dev = r.get<uint64_t>();
  m.ino = r.get<uint64_t>();
  m.tag = r.get<uint64_t>();
  m.offset = r.get<uint64_t>();
  m.ring = r.get<uint32_t>();
  m.readers = r.get<uint32_t>();
  auto n = r.get<uint64_t>();
  if (n > s.size() / 8) throw Error(ErrorCode::kInternal, "truncated collective metadata");
  m.sums.resize(n);
  for (auto& v : m.sums) v = r.get<uint64_t>();
  if (!r.at_end() || m.chunk == 0 || !known_algo(m.algo) ||
      n != (m.pooled == Pooled::kStream || m.pooled == Pooled::kAcrossNodes
                ? 0
                : (m.size + m.chunk - 1) / m.chunk) ||
      (m.size && m.segment.empty() && m.pooled != Pooled::kAcrossNodes) ||
      static_cast<uint32_t>(m.pooled) > static_cast<uint32_t>(Pooled::kAcrossNodes) ||
      ((m.pooled == Pooled::kPool || m.pooled == Pooled::kStream) && (m.pid <= 0 || m.fd < 0)) ||
      (m.pooled == Pooled::kStream &&
       (m.offset % kAlign ||
        m.offset < 64 + 8 * ((m.size + m.chunk - 1) / m.chunk) + 8 * uint64_t{m.readers})) ||
      ((m.ring || m.readers) &&
       (m.pooled != Pooled::kStream || !m.ring || m.ring > kMaxRing || !m.readers ||
        m.readers > kMaxReaders || m.chunk > (uint64_t{1} << 40))))
    throw Error(ErrorCode::kInternal, "collective metadata is inconsistent");
  return m;
}

uint64_t pool_span(const Meta& m) {
  return m.offset + (m.ring ? std::min<uint64_t>(m.size, uint64_t{m.ring} * m.chunk) : m.size);
}

}  // namespace muster::bcast
