// Memory on input: what a frame decodes to is bounded by its own bytes
// (protocol/bounded_unpack.hpp). A 60 MiB frame of nils once cost the
// daemon 1.5 GB and stalled its loop; now it is refused after a scan of
// its headers, and a concurrent job is served throughout.
#include <catch2/catch.hpp>

#include <atomic>
#include <fstream>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "muster/client.hpp"
#include "protocol/bounded_unpack.hpp"
#include "protocol/envelope.hpp"
#include "protocol/limits.hpp"
#include "support/process.hpp"

using namespace muster;
using namespace std::chrono_literals;
using test::TestDaemon;

namespace {

// kB of a /proc/PID/status line such as "VmHWM:   12345 kB".
int64_t status_kb(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

void put_be(std::string& s, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) s += static_cast<char>((v >> (8 * i)) & 0xff);
}

// A ping envelope whose payload map holds `arrays` arrays of `nils` nils
// each: one byte a nil on the wire, a 24-byte msgpack::object decoded.
std::string nil_frame(uint32_t arrays, uint32_t nils) {
  std::string f;
  f += '\x94';  // [version, request_id, type, payload]
  f += static_cast<char>(proto::kVersion);
  f += '\x07';
  f += static_cast<char>(proto::MsgType::kPing);
  f += '\xde';  // map16
  put_be(f, arrays, 2);
  for (uint32_t a = 0; a < arrays; ++a) {
    std::string key = "k" + std::to_string(a);
    f += static_cast<char>(0xa0 | key.size());
    f += key;
    f += '\xdd';  // array32
    put_be(f, nils, 4);
    f.append(nils, '\xc0');
  }
  return f;
}

ErrorCode decode_code(const std::string& f) {
  try {
    proto::decode_envelope(f.data(), f.size());
    return ErrorCode::kOk;
  } catch (const proto::EnvelopeError& e) {
    return e.code();
  }
}

}  // namespace

TEST_CASE("a frame cannot decode to more objects than its bytes and the budget allow") {
  // Within the budget: decodes.
  CHECK(decode_code(nil_frame(1, 1000)) == ErrorCode::kOk);
  // 60 MiB of nils: refused as too_large, by the scan.
  auto big = nil_frame(60, (1u << 20) - 1);
  REQUIRE(big.size() > (60u << 20));
  CHECK(decode_code(big) == ErrorCode::kTooLarge);
  // A small frame of many nils: over kFreeObjects + size / 2.
  CHECK(decode_code(nil_frame(1, 200000)) == ErrorCode::kTooLarge);
  // A header that promises more items than bytes are left: truncated,
  // refused before msgpack allocates 24 bytes per promised item.
  std::string liar = nil_frame(1, 10);
  liar[liar.size() - 14] = '\x7f';  // the array32 count's top byte: 2^31 items
  CHECK(decode_code(liar) == ErrorCode::kBadMessage);
  // Nesting past kMaxDepth: bad_message, as msgpack-c says.
  std::string deep = "\x94\x01\x07\x01\x81\xa1x";
  deep.append(limits::kMaxDepth + 2, '\x91');
  deep += '\xc0';
  CHECK(decode_code(deep) == ErrorCode::kBadMessage);
  // The scan counts map entries twice (key and value) and the root.
  std::string m = "\x82\xc0\x91\xc0\xc0\xc0";
  CHECK(codec::scan_objects(m.data(), m.size(), 0, {100, 8}) == 6);
  CHECK_THROWS_AS(codec::scan_objects(m.data(), m.size(), 0, {5, 8}), codec::TooManyObjects);
}

TEST_CASE(
    "a 60 MiB frame of nils costs the daemon at most 64 MiB over its own size, "
    "and a concurrent job is served") {
  TestDaemon d({}, test::measured_memory_env());
  Client c({d.endpoint()});
  c.join({"beside", 1, false, 0});
  c.set("before", "1");
  const auto frame = nil_frame(60, (1u << 20) - 1);
  int64_t hwm_before = status_kb(d.pid(), "VmHWM");
  REQUIRE(hwm_before > 0);

  std::atomic<bool> done{false};
  std::atomic<int> refused{0};
  std::thread attacker([&] {
    zmq::context_t ctx;
    for (int i = 0; i < 4; ++i) {
      zmq::socket_t s(ctx, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::rcvtimeo, 60000);
      s.connect(d.endpoint());
      s.send(zmq::buffer(frame));
      zmq::message_t reply;
      if (!s.recv(reply)) break;
      auto env = proto::decode_envelope(reply.data(), reply.size());
      if (env.type == static_cast<uint16_t>(proto::MsgType::kErrorReply) &&
          proto::ErrorReply::unpack(env.payload).code ==
              static_cast<uint16_t>(ErrorCode::kTooLarge))
        ++refused;
    }
    done = true;
  });
  // The normal client keeps working while the frames arrive (at least one
  // round trip even if the attacker were done first).
  int served = 0;
  do {
    c.set("k", std::to_string(served));
    REQUIRE(c.get("k", 10s) == std::to_string(served));
    ++served;
  } while (!done);
  attacker.join();
  CHECK(refused == 4);
  INFO(served << " set/get round trips during the attack");
  int64_t growth_kb = status_kb(d.pid(), "VmHWM") - hwm_before;
  INFO("peak RSS growth " << growth_kb / 1024 << " MiB for a frame of " << frame.size() / (1 << 20)
                          << " MiB");
  CHECK(growth_kb * 1024 <= static_cast<int64_t>(frame.size()) + (int64_t{64} << 20));
  REQUIRE(test::process_exists(d.pid()));
  CHECK(c.get("before", 5s) == "1");
  c.leave();
}
