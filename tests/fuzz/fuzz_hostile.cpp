// libFuzzer target: structure-aware hostile requests. Built and run by
// scripts/fuzz.sh.
//
// Where fuzz_request feeds arbitrary bytes (which rarely get past the
// envelope) and fuzz_access valid requests, this one takes a valid request
// of every message type (tests/support/sample_requests.hpp, replies too)
// and lets the input rewrite its fields and envelope with hostile values:
// huge and boundary integers, wrong types, long strings, deep nesting,
// containers whose header promises more items than follow, arrays of
// 10^5..10^6 nils, maps of 70,000 entries, ext types, duplicate and unknown
// fields. Each is decoded and handled by a State with small quotas, from a
// root, a stranger, an in-process caller or a peer. After every request:
//   - decode_envelope throws nothing but EnvelopeError, and what it decodes
//     stays within the object budget (limits.hpp);
//   - no reply is an internal error;
//   - a request answered only with an error leaves the saved state bytes
//     as they were (a refused request changes nothing);
//   - every job's store and parked requests are within the quotas, the
//     store's byte count matches its contents, and no uid owns more jobs
//     than its quota.
// Seeds (tests/fuzz/hostile-seeds/) start it at the store, parked-wait
// and job quotas.
// -malloc_limit_mb in fuzz.sh makes any single allocation over 64 MiB a
// crash: no frame here is larger than ~1.2 MiB, so one that big would be
// decoding amplification.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>

#include "core/state.hpp"
#include "fuzz/fuzz_support.hpp"
#include "log.hpp"
#include "persist/reply_cache.hpp"
#include "persist/state_file.hpp"
#include "protocol/bounded_unpack.hpp"
#include "protocol/limits.hpp"
#include "protocol/message_table.hpp"
#include "support/sample_requests.hpp"

using namespace muster;
using namespace muster::daemon;
using namespace muster::fuzz;

namespace {

// Raw MessagePack, so that headers may lie.
struct Writer {
  std::string s;
  void byte(uint8_t b) { s += static_cast<char>(b); }
  void be(uint64_t v, int n) {
    for (int k = n - 1; k >= 0; --k) byte(static_cast<uint8_t>(v >> (8 * k)));
  }
  void str(const std::string& v) {
    if (v.size() < 32) {
      byte(static_cast<uint8_t>(0xa0 | v.size()));
    } else {
      byte(0xdb);
      be(v.size(), 4);
    }
    s += v;
  }
  void object(const msgpack::object& o) {
    msgpack::sbuffer b;
    msgpack::pack(b, o);
    s.append(b.data(), b.size());
  }
};

constexpr uint64_t kBoundaries[] = {0,
                                    1,
                                    2,
                                    7,
                                    31,
                                    32,
                                    127,
                                    128,
                                    255,
                                    256,
                                    1023,
                                    1024,
                                    1025,
                                    4095,
                                    4096,
                                    4097,
                                    65535,
                                    65536,
                                    65537,
                                    1u << 20,
                                    (16u << 20) - 1,
                                    16u << 20,
                                    (16u << 20) + 1,
                                    uint64_t{1} << 31,
                                    uint64_t{1} << 32,
                                    86400000,
                                    86400001,
                                    uint64_t{1} << 53,
                                    std::numeric_limits<uint64_t>::max()};
constexpr size_t kLengths[] = {0, 1, 2, 31, 32, 127, 128, 129, 1024, 1025, 4097};

void hostile(Writer& w, Bytes& in, int depth);

void container(Writer& w, Bytes& in, int depth, bool map) {
  uint8_t n = in.next() % 4;
  w.byte(static_cast<uint8_t>((map ? 0x80 : 0x90) | n));
  for (uint8_t k = 0; k < n * (map ? 2 : 1); ++k) hostile(w, in, depth + 1);
}

void hostile(Writer& w, Bytes& in, int depth) {
  const uint8_t k = in.next() % 22;
  // The big ones (13, 14) cost milliseconds each: one in four.
  if ((k == 13 || k == 14) && depth <= 10 && in.next() % 4) return w.byte(0xc0);
  switch (depth > 10 ? k % 10 : k) {
    case 0:
      return w.byte(0xc0);
    case 1:
      return w.byte(in.next() & 1 ? 0xc3 : 0xc2);
    case 2: {  // a boundary, as the smallest encoding or as uint64
      uint64_t v = kBoundaries[in.next() % std::size(kBoundaries)];
      if (in.next() & 1) return w.byte(0xcf), w.be(v, 8);
      msgpack::sbuffer b;
      msgpack::pack(b, v);
      w.s.append(b.data(), b.size());
      return;
    }
    case 3: {  // a negative number
      int64_t v = -static_cast<int64_t>(kBoundaries[in.next() % 20]) - 1;
      if (in.next() & 1) v = std::numeric_limits<int64_t>::min();
      return w.byte(0xd3), w.be(static_cast<uint64_t>(v), 8);
    }
    case 4: {
      const double vs[] = {NAN, INFINITY, -INFINITY, -0.0, 1e308, 0.5, 4096.0};
      double v = vs[in.next() % std::size(vs)];
      uint64_t bits;
      std::memcpy(&bits, &v, 8);
      return w.byte(0xcb), w.be(bits, 8);
    }
    case 5:
    case 6: {  // a string or bin of a boundary length, odd bytes included
      size_t len = kLengths[in.next() % std::size(kLengths)];
      char c = static_cast<char>(in.next());
      if (k == 5) return w.str(std::string(len, c));
      w.byte(0xc6), w.be(len, 4);
      w.s.append(len, c);
      return;
    }
    case 7:
      return container(w, in, depth, false);
    case 8:
      return container(w, in, depth, true);
    case 9: {  // the job or key names the sample uses
      const char* names[] = {"rootjob", "other", "secret", "k0", "b", "", "node-x"};
      return w.str(names[in.next() % std::size(names)]);
    }
    case 10: {  // nesting, up to twice kMaxDepth
      int d = in.next() % (2 * limits::kMaxDepth + 1);
      for (int j = 0; j < d; ++j) w.byte(0x91);
      return w.byte(0xc0);
    }
    case 11: {  // an array that promises more than follows
      w.byte(0xdd);
      w.be(in.next() & 1 ? 0xffffffffu : (uint64_t{1} << 20) + in.u16(), 4);
      for (int j = in.next() % 8; j > 0; --j) w.byte(0xc0);
      return;
    }
    case 12: {  // a map that promises more than follows
      w.byte(0xdf);
      w.be(0x7fffffffu, 4);
      return w.byte(0xc0);
    }
    case 13: {  // many nils: around the object budget
      const uint32_t counts[] = {1000, 65535, 65536, 131072, 600000, 1048577};
      uint32_t n = counts[in.next() % std::size(counts)];
      w.byte(0xdd), w.be(n, 4);
      w.s.append(n, '\xc0');
      return;
    }
    case 14: {  // a map of many entries
      uint32_t n = in.next() & 1 ? 70000 : 300;
      w.byte(0xdf), w.be(n, 4);
      for (uint32_t j = 0; j < n; ++j) w.byte(static_cast<uint8_t>(j & 0x7f)), w.byte(0xc0);
      return;
    }
    case 15:
      return w.byte(0xd4), w.byte(1), w.byte(0);  // fixext1
    case 16:
      return w.byte(0xc1);  // never used
    case 17:
      return w.byte(0xd9), w.byte(0xff);  // str8 cut short
    default: {                            // a small positive or negative fixint
      uint8_t b = in.next();
      return w.byte(b < 0x80 || b >= 0xe0 ? b : b & 0x7f);
    }
  }
}

// A value of the same type as `like`, at a boundary: what passes the
// decoder's type checks and reaches the handlers and the quotas.
void same_type(Writer& w, const msgpack::object& like, Bytes& in) {
  switch (like.type) {
    case msgpack::type::STR: {
      size_t len = kLengths[in.next() % std::size(kLengths)];
      return w.str(std::string(len, static_cast<char>('a' + in.next() % 4)));
    }
    case msgpack::type::POSITIVE_INTEGER: {
      uint64_t v = kBoundaries[in.next() % std::size(kBoundaries)];
      return w.byte(0xcf), w.be(v, 8);
    }
    case msgpack::type::ARRAY: {  // many items like the first
      uint32_t n = like.via.array.size ? kLengths[in.next() % std::size(kLengths)] : 0;
      w.byte(0xdd), w.be(n, 4);
      for (uint32_t j = 0; j < n; ++j) w.object(like.via.array.ptr[0]);
      return;
    }
    default:
      return hostile(w, in, 1);
  }
}

// The sample's payload with fields kept, dropped, replaced, repeated and
// added as the input says.
std::string payload(const msgpack::object& map, Bytes& in) {
  Writer fields;
  uint32_t n = 0;
  for (uint32_t i = 0; i < map.via.map.size; ++i) {
    const auto& kv = map.via.map.ptr[i];
    const uint8_t op = in.next() % 8;
    if (op == 0) continue;  // dropped
    fields.object(kv.key);
    if (op == 1) {
      same_type(fields, kv.val, in);
    } else if (op == 2) {
      hostile(fields, in, 1);
    } else {
      fields.object(kv.val);
    }
    ++n;
    if (op == 3) {  // repeated, with another value
      fields.object(kv.key);
      hostile(fields, in, 1);
      ++n;
    }
  }
  for (uint8_t extra = in.next() % 4; extra == 3;) {  // an unknown field
    fields.str("unknown");
    hostile(fields, in, 1);
    ++n;
    break;
  }
  Writer w;
  w.byte(0xdf), w.be(n, 4);
  return w.s + fields.s;
}

std::string envelope(uint64_t id, uint16_t type, const std::string& body, Bytes& in) {
  Writer w;
  const uint8_t op = in.next() % 16;
  w.byte(op == 0 ? 0x95 : 0x94);
  if (op == 1) {
    hostile(w, in, 1);
  } else {
    w.byte(static_cast<uint8_t>(op == 2 ? 2 : proto::kVersion));
  }
  if (op == 3) {
    hostile(w, in, 1);
  } else {
    w.byte(0xcf), w.be(id, 8);
  }
  if (op == 4) {
    hostile(w, in, 1);
  } else {
    w.byte(0xcd), w.be(type, 2);
  }
  w.s += op == 5 ? std::string("\xc0") : body;
  if (op == 0) hostile(w, in, 1);
  if (op == 6) w.byte(0xc0);  // trailing bytes
  return w.s;
}

constexpr proto::MsgType kStateful[] = {
    proto::MsgType::kStoreSet, proto::MsgType::kStoreAdd,  proto::MsgType::kStoreCompareSet,
    proto::MsgType::kStoreGet, proto::MsgType::kStoreWait, proto::MsgType::kStoreDelete,
    proto::MsgType::kBarrier,  proto::MsgType::kJoin,      proto::MsgType::kReserve,
    proto::MsgType::kLeave};

struct Sender {
  int64_t uid;
  bool peer;
};
constexpr Sender kSenders[] = {{0, false}, {1001, false}, {-1, false}, {-1, true}};

Quotas small_quotas() {
  Quotas q;
  q.store_bytes = 4096;
  q.store_keys = 4;
  q.parked_waits = 3;
  q.jobs_per_uid = 2;
  return q;
}

void check_quotas(const State& s, const Quotas& q, const std::string& what) {
  std::map<int64_t, uint64_t> per_uid;
  for (const auto& [id, job] : s.jobs()) {
    uint64_t bytes = 0;
    for (const auto& [k, v] : job.kv) bytes += k.size() + v.size();
    if (bytes != job.kv.bytes()) die(what + ": store byte count is off in job '" + id + "'");
    if (bytes > q.store_bytes || job.kv.size() > q.store_keys)
      die(what + ": job '" + id + "' store over its quota");
    size_t parked = job.key_waiters.size();
    for (const auto& [name, b] : job.barriers) parked += b.waiters.size();
    if (parked > q.parked_waits) die(what + ": job '" + id + "' has too many parked requests");
    if (job.owner_uid >= 0 && ++per_uid[job.owner_uid] > q.jobs_per_uid)
      die(what + ": uid " + std::to_string(job.owner_uid) + " owns too many jobs");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::TwoGpuNode node;
  State& s = node.s;
  const Quotas q = small_quotas();
  s.set_quotas(q);
  StateFile file("/nonexistent");  // only encode() is used
  ReplyCache cache;
  const int64_t me = ::getpid();
  Bytes in{data, size};
  const auto table = proto::message_table();
  uint64_t id = 1;
  // Root's job exists from the start, with a key in its store, so that the
  // store's and the quotas' paths are a request away.
  for (auto frame : {*test::sample_request(proto::MsgType::kReserve, "rootjob", id++, me, 16),
                     proto::encode(id++, proto::StoreSet{"rootjob", "k", "v", std::nullopt})}) {
    auto env = proto::decode_envelope(frame.data(), frame.size());
    ReplyTo to;
    to.routing_id = "setup";
    to.peer_uid = 0;
    std::vector<Outgoing> out;
    s.handle(to, env, out);
  }
  if (s.jobs().empty() || s.jobs().begin()->second.kv.empty()) die("setup: no job with a key");
  for (int n = 0; n < 24 && in.more(); ++n) {
    // Half the time one of the requests that change a job's state.
    const uint8_t pick = in.next();
    const auto& row = pick & 1 ? table[(pick >> 1) % table.size()]
                               : *proto::message_traits(static_cast<uint16_t>(
                                     kStateful[(pick >> 1) % std::size(kStateful)]));
    const Sender& who = kSenders[in.next() % std::size(kSenders)];
    const uint8_t v = in.next();
    const std::string job = v & 0x80 ? "other" : "rootjob";
    auto sample = test::sample_request(row.type, job, id, me, v & 0x7f);
    std::string what = std::string(row.name) + " #" + std::to_string(n);
    std::string frame;
    if (in.next() % 4 == 0 && sample) {
      frame = *sample;  // as it is: builds state for the next ones
    } else {
      Writer empty;
      empty.byte(0x80);
      std::string body = empty.s;
      if (sample) {
        auto env = proto::decode_envelope(sample->data(), sample->size());
        body = payload(env.payload, in);
      }
      frame = envelope(id, static_cast<uint16_t>(row.type), body, in);
    }
    ++id;
    proto::Envelope env;
    try {
      env = proto::decode_envelope(frame.data(), frame.size());
    } catch (const proto::EnvelopeError&) {
      continue;
    } catch (const std::exception& e) {
      die(what + ": decode_envelope threw " + e.what());
    }
    codec::DecodeBudget budget{
        std::min(limits::kMaxFrameObjects, limits::kFreeObjects + frame.size() / 2),
        limits::kMaxDepth};
    if (codec::scan_objects(frame.data(), frame.size(), 0, budget) > budget.max_objects)
      die(what + ": decoded over the budget");
    ReplyTo to;
    to.routing_id = "client";
    to.request_id = env.request_id;
    to.peer_uid = who.peer ? -1 : who.uid;
    to.from_peer = who.peer;
    const std::string before = file.encode(s, cache);
    std::vector<Outgoing> out;
    s.handle(to, env, out);
    size_t replies = 0, errors = 0;
    for (const auto& o : out) {
      if (!o.link.empty()) continue;
      ++replies;
      auto r = proto::decode_envelope(o.frame.data(), o.frame.size());
      if (r.type != static_cast<uint16_t>(proto::MsgType::kErrorReply)) continue;
      ++errors;
      auto e = proto::ErrorReply::unpack(r.payload);
      if (static_cast<ErrorCode>(e.code) == ErrorCode::kInternal)
        die(what + ": internal error: " + e.message);
    }
    if (out.size() == 1 && replies == 1 && errors == 1 && file.encode(s, cache) != before)
      die(what + ": refused, yet the state changed");
    check_quotas(s, q, what);
  }
  std::vector<Outgoing> out;
  s.cancel_all(out);
  return 0;
}
