// libFuzzer target: sequences of rendezvous and peer-link events (issue 43).
// Built and run by scripts/fuzz.sh.
//
// Where the other targets feed one request at a time, this one drives a
// State through what a node daemon's links live through: jobs reserved by
// two users, rendezvous naming coordinators and vias (many distinct ones,
// the same ones again, the same one under two names), the coordinators'
// frames on those links (valid answers to the requests in flight, errors,
// garbage), reconnects, the clock (heartbeats, lost links), and jobs
// leaving. After every step:
//   - nothing but a reply escapes: no entry point throws (in the daemon an
//     exception there would only be contained by the loop's backstop);
//   - the links one uid's jobs name stay within NodeLinks::kLinksPerUid,
//     and all of them within the daemon's cap;
//   - no reply to a local request is an internal error.
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "cluster/multi_node.hpp"
#include "cluster/node_links.hpp"
#include "core/state.hpp"
#include "fuzz/fuzz_support.hpp"
#include "log.hpp"
#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/messages.hpp"

using namespace muster;
using namespace muster::daemon;
using namespace muster::fuzz;

namespace {

constexpr size_t kLinkCap = 24;
constexpr int64_t kUids[] = {0, 65534};

std::string endpoint(uint8_t b) {
  // Few hosts, many ports: the same link again, and new ones.
  static const char* hosts[] = {"127.0.0.1", "10.0.0.2", "localhost"};
  return std::string(hosts[b % 3]) + ":" + std::to_string(20000 + (b >> 2));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  PidWatch watch;
  State s({{0, "sim0"}}, watch);
  s.cluster().configure("here", std::chrono::milliseconds(2000), "", 4);
  s.cluster().set_link_cap(kLinkCap);
  const int64_t me = ::getpid();
  Bytes in{data, size};
  uint64_t id = 1;
  auto now = Clock::now();
  std::set<std::string> named;           // every link name a step used
  std::map<std::string, uint64_t> sent;  // link -> the last request id sent on it
  auto step = [&](const char* what, auto&& f) {
    std::vector<Outgoing> out;
    try {
      f(out);
    } catch (const std::exception& e) {
      die(std::string(what) + " threw: " + e.what());
    }
    for (const auto& o : out) {
      if (!o.link.empty()) {
        named.insert(o.link);
        try {
          auto env = proto::decode_envelope(o.frame.data(), o.frame.size());
          sent[o.link] = env.request_id;
        } catch (const std::exception& e) {
          die(std::string(what) + ": a frame to a link does not decode: " + e.what());
        }
        continue;
      }
      auto r = proto::decode_envelope(o.frame.data(), o.frame.size());
      if (r.type == static_cast<uint16_t>(proto::MsgType::kErrorReply) &&
          static_cast<ErrorCode>(proto::ErrorReply::unpack(r.payload).code) == ErrorCode::kInternal)
        die(std::string(what) +
            ": internal error: " + proto::ErrorReply::unpack(r.payload).message);
    }
  };
  auto request = [&](int64_t uid, const std::string& frame, const char* what) {
    step(what, [&](std::vector<Outgoing>& out) {
      auto env = proto::decode_envelope(frame.data(), frame.size());
      ReplyTo to;
      to.routing_id = "client" + std::to_string(uid);
      to.request_id = env.request_id;
      to.peer_uid = uid;
      to.peer_pid = me;
      s.handle(to, env, out);
    });
  };
  for (int n = 0; n < 64 && in.more(); ++n) {
    const uint8_t op = in.next();
    const int64_t uid = kUids[op >> 7];
    const std::string job = "j" + std::to_string(in.next() % 48);
    switch (op % 8) {
      case 0:
      case 1:
        request(uid, proto::encode(id++, proto::Reserve{job, 1, false, {}, me}), "reserve");
        break;
      case 2:
      case 3: {
        proto::Rendezvous m{job, endpoint(in.next()), -1, 2, 2, 0, 60000, "127.0.0.1", 29500};
        if (op & 0x10) m.via = endpoint(in.next());
        request(uid, proto::encode(id++, m), "rendezvous");
        break;
      }
      case 4: {  // a coordinator's frame on a link in use
        if (sent.empty()) break;
        auto it = sent.begin();
        std::advance(it, in.next() % sent.size());
        std::string frame;
        switch (in.next() % 4) {
          case 0:
            frame = proto::encode_error(it->second, ErrorCode::kUnavailable, "no");
            break;
          case 1:
            frame = proto::encode(it->second, proto::HeartbeatAck{});
            break;
          case 2: {
            proto::HeartbeatAck a;
            a.events.push_back({job, 1, "broken", "fuzz"});
            frame = proto::encode(it->second, a);
            break;
          }
          default:
            for (int k = in.next() % 32; k > 0; --k) frame += static_cast<char>(in.next());
        }
        step("a link frame", [&](std::vector<Outgoing>& out) {
          s.cluster().on_link_frame(it->first, frame.data(), frame.size(), out);
        });
        break;
      }
      case 5: {
        if (named.empty()) break;
        auto it = named.begin();
        std::advance(it, in.next() % named.size());
        step("a reconnect",
             [&](std::vector<Outgoing>& out) { s.cluster().link_reconnected(*it, out); });
        break;
      }
      case 6:
        now += std::chrono::milliseconds(250 * (1 + in.next() % 16));
        step("a tick", [&](std::vector<Outgoing>& out) {
          s.cluster().tick(now, out);
          s.expire(now, out);
        });
        break;
      default:
        request(uid, proto::encode(id++, proto::Leave{job, me, 0}), "leave");
    }
    // The links' caps hold whatever came before.
    std::map<int64_t, std::set<std::string>> per_uid;
    for (const auto& [jid, j] : s.jobs())
      if (j.cluster) {
        per_uid[j.owner_uid].insert(j.cluster->coordinator);
        if (!j.cluster->via.empty()) per_uid[j.owner_uid].insert(j.cluster->via);
      }
    for (const auto& [u, links] : per_uid)
      if (links.size() > NodeLinks::kLinksPerUid)
        die("uid " + std::to_string(u) + "'s jobs name " + std::to_string(links.size()) + " links");
    size_t live = 0;
    for (const auto& l : named) live += s.cluster().has_link(l);
    if (live > kLinkCap) die(std::to_string(live) + " links kept, over the cap");
  }
  return 0;
}
