// libFuzzer target over the envelope decoder and the daemon's request
// handler (daemon::State), without sockets. Built and run by scripts/fuzz.sh.
//
// Input: one or more frames separated by the two bytes C1 C1 (0xc1 is the
// one byte MessagePack never uses as a type, so valid frames of the seed
// corpus never contain it). Each frame goes through proto::decode_envelope
// and, when it decodes, State::handle, exactly as server.cpp does; between
// frames expired waits are failed. At the end a simulated exit of pid 1 (the
// pid the seed corpus joins with), a far-future expire() and cancel_all()
// answer whatever still waits. Every reply frame must decode as an envelope
// whose payload unpacks as the reply type it names; error replies must carry
// a known code. Each input gets a fresh State and PidWatch, so inputs are
// independent (reproducible) and no pidfd outlives its input.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/multi_node.hpp"
#include "core/state.hpp"
#include "log.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/message_table.hpp"
#include "protocol/sampler_messages.hpp"
#include "protocol/store_messages.hpp"

using namespace muster;
using namespace muster::daemon;

namespace {

const std::string kRoutingId("fuzz-peer\0id", 12);

[[noreturn]] void die(const std::string& why) {
  std::fprintf(stderr, "fuzz_request: %s\n", why.c_str());
  std::abort();
}

void check_reply(const Outgoing& o, const std::set<uint64_t>& ids) {
  // A request to a coordinator (a rendezvous, a forwarded store request) is
  // not a reply; it must still be a frame that decodes.
  if (!o.link.empty()) {
    try {
      proto::decode_envelope(o.frame.data(), o.frame.size());
    } catch (const std::exception& e) {
      die(std::string("request to a peer does not decode: ") + e.what());
    }
    return;
  }
  if (o.to.routing_id != kRoutingId) die("reply to the wrong routing id");
  proto::Envelope env;
  try {
    env = proto::decode_envelope(o.frame.data(), o.frame.size());
  } catch (const std::exception& e) {
    die(std::string("reply frame does not decode: ") + e.what());
  }
  if (env.request_id != o.to.request_id) die("reply's request id differs from its ReplyTo");
  if (!ids.count(env.request_id)) die("reply to request id never sent");
  try {
    switch (static_cast<proto::MsgType>(env.type)) {
      case proto::MsgType::kOk:
        proto::Ok::unpack(env.payload);
        break;
      case proto::MsgType::kErrorReply: {
        auto e = proto::ErrorReply::unpack(env.payload);
        auto code = static_cast<ErrorCode>(e.code);
        if (e.code == 0 || std::string_view(error_name(code)) == "unknown_error")
          die("error reply with unknown code " + std::to_string(e.code));
        if (code == ErrorCode::kInternal) die("internal error: " + e.message);
        break;
      }
      case proto::MsgType::kPong:
        proto::Pong::unpack(env.payload);
        break;
      case proto::MsgType::kRankInfo:
        proto::RankInfo::unpack(env.payload);
        break;
      case proto::MsgType::kReserved:
        proto::Reserved::unpack(env.payload);
        break;
      case proto::MsgType::kValue:
        proto::Value::unpack(env.payload);
        break;
      case proto::MsgType::kInt:
        proto::Int::unpack(env.payload);
        break;
      case proto::MsgType::kBool:
        proto::Bool::unpack(env.payload);
        break;
      case proto::MsgType::kStatusReply:
        proto::StatusReply::unpack(env.payload);
        break;
      case proto::MsgType::kShardReply:
        proto::ShardReply::unpack(env.payload);
        break;
      case proto::MsgType::kSamplerPlace:
        proto::SamplerPlace::unpack(env.payload);
        break;
      case proto::MsgType::kClusterStateReply:
        proto::ClusterStateReply::unpack(env.payload);
        break;
      case proto::MsgType::kWorld:
        proto::World::unpack(env.payload);
        break;
      case proto::MsgType::kHeartbeatAck:
        proto::HeartbeatAck::unpack(env.payload);
        break;
      case proto::MsgType::kBcastChunk:
        proto::BcastChunk::unpack(env.payload);
        break;
      case proto::MsgType::kValues:
        proto::Values::unpack(env.payload);
        break;
      case proto::MsgType::kJobWaitsReply:
        proto::JobWaitsReply::unpack(env.payload);
        break;
      case proto::MsgType::kReplies:
        proto::Replies::unpack(env.payload);
        break;
      default:
        die(std::string("reply of non-reply type ") + proto::type_name(env.type));
    }
  } catch (const std::exception& e) {
    die(std::string("reply payload does not unpack: ") + e.what());
  }
}

// Requests that are valid but only cost time and memory (a shuffled shard
// of up to 2^28 samples is a 1 GiB permutation, seconds of work): legal, and
// bounded by the daemon's own limits, but they would make the fuzzer crawl.
bool too_costly(const proto::Envelope& env) {
  if (env.type != static_cast<uint16_t>(proto::MsgType::kShard)) return false;
  try {
    return proto::Shard::unpack(env.payload).dataset_size > (uint64_t{1} << 20);
  } catch (const std::exception&) {
    return false;  // handle() refuses it
  }
}

// The reply types check_reply unpacks. A reply row added to the message
// table without a case above stops the fuzzer at once, not only when a
// random input first reaches the handler that sends it.
constexpr proto::MsgType kUnpacked[] = {
    proto::MsgType::kOk,         proto::MsgType::kErrorReply,    proto::MsgType::kPong,
    proto::MsgType::kRankInfo,   proto::MsgType::kReserved,      proto::MsgType::kValue,
    proto::MsgType::kInt,        proto::MsgType::kBool,          proto::MsgType::kStatusReply,
    proto::MsgType::kShardReply, proto::MsgType::kSamplerPlace,  proto::MsgType::kClusterStateReply,
    proto::MsgType::kWorld,      proto::MsgType::kHeartbeatAck,  proto::MsgType::kBcastChunk,
    proto::MsgType::kValues,     proto::MsgType::kJobWaitsReply, proto::MsgType::kReplies};

void check_reply_rows() {
  for (const auto& row : proto::message_table()) {
    if (row.scope != proto::kScopeReply) continue;
    bool known = false;
    for (auto t : kUnpacked) known = known || t == row.type;
    if (!known) die(std::string("check_reply cannot unpack reply type ") + row.name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  log::set_level(log::Level::kError);
  check_reply_rows();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string_view> frames;
  for (;;) {
    auto at = in.find("\xc1\xc1");
    frames.push_back(in.substr(0, at));
    if (at == std::string_view::npos) break;
    in.remove_prefix(at + 2);
  }

  PidWatch watch;
  State state({{0, "Sim GPU 0"}, {1, "Sim GPU 1"}, {2, "Sim GPU 2"}}, watch);
  // As a daemon that may peer: rendezvous requests get as far as a link.
  state.cluster().configure("fuzz-node:/run/fuzz", std::chrono::milliseconds(10000), "", 16);
  std::vector<Outgoing> out;
  std::set<uint64_t> ids{0};
  for (auto f : frames) {
    ReplyTo to{kRoutingId, false, 0};
    try {
      auto env = proto::decode_envelope(f.data(), f.size());
      to.request_id = env.request_id;
      ids.insert(env.request_id);
      if (!too_costly(env)) state.handle(to, env, out);
    } catch (const proto::EnvelopeError& e) {
      ids.insert(e.request_id);
      to.request_id = e.request_id;
      out.push_back({to, proto::encode_error(e.request_id, e.code(), e.what())});
    }
    state.expire(Clock::now(), out);
    for (const auto& o : out) check_reply(o, ids);
    out.clear();
  }
  check_reply({{kRoutingId, false, 0}, proto::encode(0, state.reports().status()), {}}, ids);

  state.on_pid_exit(1, out);
  state.expire(Clock::now() + std::chrono::hours(25), out);
  state.cancel_all(out);
  for (const auto& o : out) check_reply(o, ids);
  return 0;
}
