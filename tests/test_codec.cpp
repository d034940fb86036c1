// Every message survives encode/decode unchanged, and every class of bad
// frame is refused with an Error (never a crash, never a half-decoded value).
#include <catch2/catch.hpp>

#include <random>

#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/limits.hpp"

using namespace muster;
using namespace muster::proto;

namespace {

template <class M>
M round_trip(const M& m, uint64_t id = 42) {
  auto bytes = encode(id, m);
  auto env = decode_envelope(bytes.data(), bytes.size());
  REQUIRE(env.version == kVersion);
  REQUIRE(env.request_id == id);
  REQUIRE(env.type == static_cast<uint16_t>(M::kType));
  return M::unpack(env.payload);
}

// Builds an envelope whose payload map is written by f.
template <class F>
std::string custom(uint16_t type, F f, uint16_t version = kVersion, uint64_t id = 7) {
  codec::Buffer buf;
  codec::Packer p(buf);
  f(p);
  return encode_raw(id, type, buf, version);
}

ErrorCode decode_error(const std::string& bytes) {
  try {
    auto env = decode_envelope(bytes.data(), bytes.size());
    // Envelope fine: let the payload decoder judge.
    switch (static_cast<MsgType>(env.type)) {
      case MsgType::kJoin:
        Join::unpack(env.payload);
        break;
      case MsgType::kStoreSet:
        StoreSet::unpack(env.payload);
        break;
      case MsgType::kStoreWait:
        StoreWait::unpack(env.payload);
        break;
      case MsgType::kAttach:
        Attach::unpack(env.payload);
        break;
      case MsgType::kReserve:
        Reserve::unpack(env.payload);
        break;
      default:
        break;
    }
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::kOk;
}

}  // namespace

TEST_CASE("every request and reply survives a round trip") {
  CHECK(round_trip(Ping{}) == Ping{});
  CHECK(round_trip(Pong{"0.1.0", 1234}) == Pong{"0.1.0", 1234});
  Join j{"job-1", 8, true, 4242, 3};
  CHECK(round_trip(j) == j);
  Join any{"a.b:c@d+e_f", 1, false, 1, -1};
  CHECK(round_trip(any) == any);
  RankInfo ri{"job", 5, 1, 8, 4, 1, 2, 3, 77};
  CHECK(round_trip(ri) == ri);
  CHECK(round_trip(Leave{"job", 99, 3}) == Leave{"job", 99, 3});
  Reserve rs{"job", 4, true, {0, 1, 4, 6}, 555};
  CHECK(round_trip(rs) == rs);
  Reserve restarted{"job", 2, false, {}, 555, 3};
  CHECK(round_trip(restarted) == restarted);
  // Generation 0 is left out, as in an older peer's frame, and decodes as 0.
  CHECK(round_trip(rs).generation == 0);
  CHECK(decode_error(encode(1, Reserve{"j", 1, true, {}, 5, 1ULL << 40})) ==
        ErrorCode::kInvalidArgument);
  Reserved rd{3, {0, -1, 4}};
  CHECK(round_trip(rd) == rd);
  Attach at{"job", {10, 11, 12}};
  CHECK(round_trip(at) == at);
  std::string binary("\0\xff\x01value", 8);
  StoreSet ss{"job", "key/with/slashes", binary};
  CHECK(round_trip(ss) == ss);
  CHECK(round_trip(StoreGet{"job", "k", 1500}) == StoreGet{"job", "k", 1500});
  CHECK(round_trip(StoreAdd{"job", "k", -7}) == StoreAdd{"job", "k", -7});
  StoreCompareSet cs{"job", "k", "", binary};
  CHECK(round_trip(cs) == cs);
  CHECK(round_trip(StoreDelete{"job", "k"}) == StoreDelete{"job", "k"});
  StoreWait sw{"job", {"a", "b", "c"}, 0};
  CHECK(round_trip(sw) == sw);
  Barrier b{"job", 3, "epoch-1", 60000};
  CHECK(round_trip(b) == b);
  CHECK(round_trip(Status{}) == Status{});
  CHECK(round_trip(Ok{}) == Ok{});
  CHECK(round_trip(ErrorReply{7, "timed out"}) == ErrorReply{7, "timed out"});
  CHECK(round_trip(Value{binary}) == Value{binary});
  CHECK(round_trip(Int{INT64_MIN}) == Int{INT64_MIN});
  CHECK(round_trip(Bool{true}) == Bool{true});
  StatusReply st{"0.1.0",
                 12,
                 3.5,
                 {{0, "GPU 0", "job", 1, 100}, {1, "GPU 1", "", -1, 0}},
                 {{"job", 0, 2, 2, {{0, 0, 100, 1, "joined"}, {1, 1, 101, -1, "running"}}}}};
  CHECK(round_trip(st) == st);
}

TEST_CASE("a status reply's GPU topology and GPU source round-trip, known or not") {
  StatusReply st{"0.1.0", 12, 3.5, {{0, "GPU 0", "", -1, 0}, {1, "GPU 1", "", -1, 0}}, {}};
  st.gpu_source = "nvml";
  st.devices[0].cpu_affinity = "0-23,48-71";
  st.devices[0].nvlinks = {0, 18};
  st.devices[0].paths = {0, 40};
  st.devices[1].nvlinks = {18, 0};
  st.devices[1].paths = {40, 0};
  CHECK(round_trip(st) == st);
  // Unknown (simulated GPUs, an NVML without topology): empty, and so back.
  StatusReply bare{"0.1.0", 12, 3.5, {{0, "GPU 0", "", -1, 0}}, {}};
  CHECK(round_trip(bare) == bare);
  CHECK(round_trip(bare).devices.at(0).nvlinks.empty());
  CHECK(round_trip(bare).gpu_source.empty());
  // A path level past NVML's (50 is the last; the wire allows up to 100).
  st.devices[1].paths = {101, 0};
  CHECK_THROWS(round_trip(st));
}

TEST_CASE("the generation fence of store requests and barriers round-trips, absent or not") {
  std::string binary("\0\xff", 2);
  // Present, 0 included (generation 0 is a real generation, not "absent").
  for (std::optional<uint64_t> g : {std::optional<uint64_t>(0), std::optional<uint64_t>(3),
                                    std::optional<uint64_t>(UINT64_MAX)}) {
    INFO("generation " << *g);
    StoreSet ss{"job", "k", binary, g};
    CHECK(round_trip(ss).generation == g);
    CHECK(round_trip(ss) == ss);
    StoreGet sg{"job", "k", 10, g};
    CHECK(round_trip(sg) == sg);
    StoreAdd sa{"job", "k", 5, g};
    CHECK(round_trip(sa) == sa);
    StoreCompareSet cs{"job", "k", "", binary, g};
    CHECK(round_trip(cs) == cs);
    StoreDelete sd{"job", "k", g};
    CHECK(round_trip(sd) == sd);
    StoreWait sw{"job", {"a", "b"}, 0, g};
    CHECK(round_trip(sw) == sw);
    Barrier b{"job", 1, "x", 100, g};
    CHECK(round_trip(b).generation == g);
    CHECK(round_trip(b) == b);
  }
  // Absent: the frame an older client sends (no key at all), decoded as absent.
  CHECK(!round_trip(StoreSet{"job", "k", "v"}).generation);
  CHECK(!round_trip(Barrier{"job", 0, "x", 1}).generation);
  auto old_frame = custom(static_cast<uint16_t>(MsgType::kStoreSet), [](codec::Packer& p) {
    p.pack_map(3);
    codec::key(p, "job"), codec::put_str(p, "job");
    codec::key(p, "key"), codec::put_str(p, "k");
    codec::key(p, "value"), codec::put_bin(p, "v");
  });
  CHECK(encode(7, StoreSet{"job", "k", "v"}) == old_frame);
  // A mistyped or negative generation is refused.
  auto bad = [](auto write_generation) {
    return custom(static_cast<uint16_t>(MsgType::kStoreSet), [&](codec::Packer& p) {
      p.pack_map(4);
      codec::key(p, "job"), codec::put_str(p, "job");
      codec::key(p, "key"), codec::put_str(p, "k");
      codec::key(p, "value"), codec::put_bin(p, "v");
      codec::key(p, "generation"), write_generation(p);
    });
  };
  CHECK(decode_error(bad([](codec::Packer& p) { codec::put_str(p, "1"); })) ==
        ErrorCode::kBadMessage);
  CHECK(decode_error(bad([](codec::Packer& p) { p.pack(int64_t{-1}); })) != ErrorCode::kOk);
  CHECK(decode_error(bad([](codec::Packer& p) { p.pack(uint64_t{2}); })) == ErrorCode::kOk);
}

TEST_CASE("an empty, oversized, non-MessagePack or truncated frame is a bad_message") {
  CHECK(decode_error("") == ErrorCode::kBadMessage);
  CHECK(decode_error("\xc1") == ErrorCode::kBadMessage);  // never-used MessagePack byte
  CHECK(decode_error("GET / HTTP/1.1\r\n\r\n") == ErrorCode::kBadMessage);
  auto good = encode(9, Join{"job", 2, true, 100, -1});
  for (size_t cut = 0; cut < good.size(); ++cut)
    CHECK(decode_error(good.substr(0, cut)) == ErrorCode::kBadMessage);
  CHECK(decode_error(good + "x") == ErrorCode::kBadMessage);  // trailing bytes
  std::string huge(limits::kMaxFrameBytes + 1, '\0');
  CHECK(decode_error(huge) == ErrorCode::kTooLarge);
}

TEST_CASE("random bytes never crash the decoder and always yield an error code") {
  std::mt19937 rng(12345);
  auto good = encode(9, StoreSet{"job", "key", "value"});
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    if (i % 2) {
      s.resize(rng() % 64);
      for (auto& c : s) c = static_cast<char>(rng());
    } else {
      s = good;  // flip bytes of a valid frame: reaches deeper code
      for (int k = 0; k < 3; ++k) s[rng() % s.size()] = static_cast<char>(rng());
    }
    auto code = decode_error(s);
    CHECK((code == ErrorCode::kOk || code == ErrorCode::kBadMessage ||
           code == ErrorCode::kBadVersion || code == ErrorCode::kUnknownType ||
           code == ErrorCode::kInvalidArgument || code == ErrorCode::kTooLarge));
  }
}

TEST_CASE("the envelope must be a four-item array with integer header fields") {
  codec::Buffer buf;
  codec::Packer p(buf);
  p.pack_array(3);
  p.pack(1);
  p.pack(2);
  p.pack(3);
  CHECK(decode_error(std::string(buf.data(), buf.size())) == ErrorCode::kBadMessage);
  codec::Buffer m;
  codec::Packer pm(m);
  pm.pack_map(0);
  CHECK(decode_error(std::string(m.data(), m.size())) == ErrorCode::kBadMessage);
  // payload not a map
  codec::Buffer b2;
  codec::Packer p2(b2);
  p2.pack_array(4);
  p2.pack(kVersion);
  p2.pack(5);
  p2.pack(static_cast<uint16_t>(MsgType::kPing));
  p2.pack(std::string("payload"));
  try {
    decode_envelope(b2.data(), b2.size());
    FAIL("accepted a non-map payload");
  } catch (const EnvelopeError& e) {
    CHECK(e.code() == ErrorCode::kBadMessage);
    CHECK(e.request_id == 5);  // so the error reply can be matched
  }
}

TEST_CASE("a wrong protocol version is refused with bad_version and keeps the request id") {
  auto bytes = custom(
      static_cast<uint16_t>(MsgType::kPing), [](auto& p) { p.pack_map(0); }, 99, 31);
  try {
    decode_envelope(bytes.data(), bytes.size());
    FAIL("accepted version 99");
  } catch (const EnvelopeError& e) {
    CHECK(e.code() == ErrorCode::kBadVersion);
    CHECK(e.request_id == 31);
    CHECK(std::string(e.what()).find("version 99") != std::string::npos);
  }
}

TEST_CASE("an unknown message type is refused with unknown_type") {
  auto bytes = custom(4000, [](auto& p) { p.pack_map(0); });
  CHECK(decode_error(bytes) == ErrorCode::kUnknownType);
}

TEST_CASE("payload fields are checked for presence, type and range") {
  auto join = [](auto f) { return custom(static_cast<uint16_t>(MsgType::kJoin), f); };
  // missing pid
  CHECK(decode_error(join([](auto& p) {
          p.pack_map(4);
          codec::key(p, "job"), codec::put_str(p, "j");
          codec::key(p, "local_world_size"), p.pack(2);
          codec::key(p, "wants_gpu"), p.pack(true);
          codec::key(p, "local_rank"), p.pack(-1);
        })) == ErrorCode::kBadMessage);
  // local_world_size as a string
  CHECK(decode_error(join([](auto& p) {
          p.pack_map(5);
          codec::key(p, "job"), codec::put_str(p, "j");
          codec::key(p, "local_world_size"), codec::put_str(p, "2");
          codec::key(p, "wants_gpu"), p.pack(true);
          codec::key(p, "pid"), p.pack(5);
          codec::key(p, "local_rank"), p.pack(-1);
        })) == ErrorCode::kBadMessage);
  // world size 0, local rank out of range, bad job id characters, empty job id
  auto join_with = [&](uint32_t lws, int64_t lr, std::string job) {
    return decode_error(encode(1, Join{job, lws, true, 5, lr}));
  };
  CHECK(join_with(0, -1, "j") == ErrorCode::kInvalidArgument);
  CHECK(join_with(5000, -1, "j") == ErrorCode::kInvalidArgument);
  CHECK(join_with(4, 4, "j") == ErrorCode::kInvalidArgument);
  CHECK(join_with(4, -2, "j") == ErrorCode::kInvalidArgument);
  CHECK(join_with(4, 0, "bad job") == ErrorCode::kInvalidArgument);
  CHECK(join_with(4, 0, "") == ErrorCode::kInvalidArgument);
  CHECK(join_with(4, 0, std::string(200, 'x')) == ErrorCode::kTooLarge);
  // pid 0 is not a process
  CHECK(decode_error(encode(1, Join{"j", 1, true, 0, -1})) == ErrorCode::kInvalidArgument);
  // store limits
  CHECK(decode_error(encode(1, StoreSet{"j", "", "v"})) == ErrorCode::kInvalidArgument);
  // Keys as long as programs give TCPStore pass, up to 64 KiB; the keys of
  // one wait at most 1 MiB together.
  CHECK(decode_error(encode(1, StoreSet{"j", std::string(2000, 'k'), "v"})) == ErrorCode::kOk);
  CHECK(decode_error(encode(1, StoreSet{"j", std::string(limits::kMaxStoreKeyBytes + 1, 'k'),
                                        "v"})) == ErrorCode::kTooLarge);
  CHECK(decode_error(encode(1, StoreWait{"j", std::vector<std::string>(18, std::string(60000, 'k')),
                                         0})) == ErrorCode::kTooLarge);
  CHECK(decode_error(encode(1, StoreWait{"j", std::vector<std::string>(17, std::string(60000, 'k')),
                                         0})) == ErrorCode::kOk);
  CHECK(decode_error(encode(1, StoreWait{"j", {}, 0})) == ErrorCode::kInvalidArgument);
  CHECK(decode_error(encode(1, StoreWait{"j", {"a"}, -5})) == ErrorCode::kInvalidArgument);
  CHECK(decode_error(encode(1, Reserve{"j", 2, true, {4096}, 5})) == ErrorCode::kInvalidArgument);
  // a NUMA binding status would show must be one muster run applies
  CHECK(decode_error(encode(1, Attach{"j", {5}, "fast"})) == ErrorCode::kInvalidArgument);
  CHECK(decode_error(encode(1, Attach{"j", {5}, std::string(17, 'n')})) == ErrorCode::kTooLarge);
  CHECK(round_trip(Attach{"j", {5}, "socket"}).numa_binding == "socket");
}

TEST_CASE("broadcast-across-nodes messages round-trip and check their chunking") {
  auto decode = [](const std::string& bytes, auto tag) {
    auto env = decode_envelope(bytes.data(), bytes.size());
    return decltype(tag)::unpack(env.payload);
  };
  auto code_of = [&](const std::string& bytes, auto tag) {
    try {
      decode(bytes, tag);
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::kOk;
  };
  const uint64_t chunk = 1 << 20, size = 5 * chunk + 17;  // 6 chunks, the last of 17 bytes
  BcastPush push{"job", 3, 9, 5, size, chunk, 5, 0xabcdef, std::string(17, 'x'), 1000};
  CHECK(round_trip(push) == push);
  BcastPush full = push;
  full.index = 2;
  full.data = std::string(chunk, '\0');
  CHECK(round_trip(full) == full);
  BcastPull pull{"job", 3, 9, 5, 1, size, chunk, 2, 4, 500};
  CHECK(round_trip(pull) == pull);
  BcastLeave leave{"job", 3, 9, 5, 1, size, chunk, "gave up"};
  CHECK(round_trip(leave) == leave);
  BcastChunk ch;
  ch.index = 4, ch.sum = 77, ch.data = std::string(100, 'y');
  CHECK(round_trip(ch) == ch);
  // A rank names its pool instead of carrying the bytes (PoolRef): then no
  // bytes, and a chunk its daemon wrote there comes without them.
  BcastPush by_pool = full;
  by_pool.data.clear();
  by_pool.pool = PoolRef{7, 11, 12345, 4096};
  CHECK(round_trip(by_pool) == by_pool);
  BcastPush both = by_pool;
  both.data = full.data;
  CHECK(code_of(encode(1, both), BcastPush{}) == ErrorCode::kInvalidArgument);
  BcastPull into = pull;
  into.pool = PoolRef{0, 1, 2, 0};  // fd 0 is a descriptor like any other
  CHECK(round_trip(into) == into);
  CHECK(round_trip(pull).pool.fd == std::nullopt);
  BcastChunk written;
  written.index = 4, written.sum = 77, written.written = true;
  CHECK(round_trip(written) == written);
  // The shared frame names its broadcast (BcastPull::shared).
  BcastChunk shared = ch;
  shared.job = "job", shared.generation = 3, shared.seq = 9, shared.root = 5;
  CHECK(round_trip(shared) == shared);
  BcastPull asks_shared = pull;
  asks_shared.shared = true;
  CHECK(round_trip(asks_shared) == asks_shared);
  written.data = "x";
  CHECK(code_of(encode(1, written), BcastChunk{}) == ErrorCode::kInvalidArgument);
  CHECK(std::string(type_name(static_cast<uint16_t>(MsgType::kBcastPush))) == "bcast_push");
  CHECK(std::string(type_name(static_cast<uint16_t>(MsgType::kBcastChunk))) == "bcast_chunk");

  auto bad_push = [&](auto change) {
    BcastPush m = push;
    change(m);
    return code_of(encode(1, m), BcastPush{});
  };
  // A chunk's bytes must be exactly its share of the size.
  CHECK(bad_push([](BcastPush& m) { m.data += "!"; }) == ErrorCode::kInvalidArgument);
  CHECK(bad_push([&](BcastPush& m) { m.index = 1; }) == ErrorCode::kInvalidArgument);
  // No chunk past the end, no empty broadcast, chunks within the limits.
  CHECK(bad_push([](BcastPush& m) { m.index = 6; }) == ErrorCode::kInvalidArgument);
  CHECK(bad_push([](BcastPush& m) { m.size = 0; }) == ErrorCode::kInvalidArgument);
  CHECK(bad_push([](BcastPush& m) { m.chunk = 100; }) == ErrorCode::kInvalidArgument);
  CHECK(bad_push([](BcastPush& m) { m.chunk = kMaxBcastChunk * 2; }) ==
        ErrorCode::kInvalidArgument);
  CHECK(bad_push([](BcastPush& m) { m.seq = 0; }) == ErrorCode::kInvalidArgument);
  CHECK(bad_push([](BcastPush& m) { m.job = "bad job"; }) == ErrorCode::kInvalidArgument);
  CHECK(bad_push([](BcastPush& m) { m.timeout_ms = -1; }) == ErrorCode::kInvalidArgument);
  // A pull holds no more chunks than the one it asks for.
  BcastPull ahead = pull;
  ahead.have = 5;
  CHECK(code_of(encode(1, ahead), BcastPull{}) == ErrorCode::kInvalidArgument);
  BcastPull past = pull;
  past.index = 6;
  CHECK(code_of(encode(1, past), BcastPull{}) == ErrorCode::kInvalidArgument);
  // Fields are required.
  auto no_data = custom(static_cast<uint16_t>(MsgType::kBcastChunk), [](auto& p) {
    p.pack_map(2);
    codec::key(p, "index"), p.pack(1);
    codec::key(p, "sum"), p.pack(2);
  });
  CHECK(code_of(no_data, BcastChunk{}) == ErrorCode::kBadMessage);
}
