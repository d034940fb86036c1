// libFuzzer target over the message table's check (admit + authorize in
// daemon/core/access.cpp) and everything behind it, without sockets. Built
// and run by scripts/fuzz.sh.
//
// Where fuzz_request feeds arbitrary bytes, this one feeds only valid
// envelopes: each 3 input bytes pick a row of the message table, a sender
// (root, two strangers, an in-process caller, a peer daemon) and a variant
// of the request (tests/support/sample_requests.hpp), naming root's job or
// another. The state starts with root's job holding two GPUs and a secret
// in its store. After every request:
//   - a stranger's request that names a job of another uid (and none of its
//     own), whose row says only the job's owner may send it, is refused
//     (unknown_job: the name is the stranger's own namespace; a creating
//     one for the pid it claims),
//     sends nothing to any coordinator and leaves the saved state bytes as
//     they were; so is a stranger's request whose row only root may send;
//   - nothing a stranger is told carries the secret, or (in a status) a job
//     or pid of another uid;
//   - no request ends in an internal error.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>

#include "core/state.hpp"
#include "fuzz/fuzz_support.hpp"
#include "log.hpp"
#include "persist/reply_cache.hpp"
#include "persist/state_file.hpp"
#include "protocol/message_table.hpp"
#include "support/replies.hpp"
#include "support/sample_requests.hpp"

using namespace muster;
using namespace muster::daemon;
using namespace muster::fuzz;

namespace {

const std::string kRootJob = "rootjob";
const std::string kSecret = "s3cr3t-value";

struct Sender {
  int64_t uid;
  bool peer;
  const char* name;
};
constexpr Sender kSenders[] = {
    {0, false, "root"},        {1001, false, "uid 1001"}, {65534, false, "uid 65534"},
    {-1, false, "in-process"}, {-1, true, "peer daemon"},
};

struct Answer {
  std::vector<proto::Envelope> replies;
  std::vector<std::string> frames;
  size_t to_links = 0;
};

Answer send(State& s, const Sender& who, const std::string& frame) {
  ReplyTo to;
  to.routing_id = "client";
  to.peer_uid = who.peer ? -1 : who.uid;
  to.from_peer = who.peer;
  Answer a;
  a.frames = test::client_frames(test::handle_frame(s, to, frame), a.to_links);
  for (const auto& f : a.frames) a.replies.push_back(proto::decode_envelope(f.data(), f.size()));
  return a;
}

// The owners of the jobs of that name (each user's job names are their
// own: several users may each have one).
std::set<int64_t> owners_of(const State& s, const std::string& job) {
  std::set<int64_t> owners;
  for (const auto& j : s.reports().status().jobs)
    if (j.id == job) owners.insert(j.uid);
  return owners;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::TwoGpuNode node;
  State& s = node.s;
  StateFile file("/nonexistent");  // only encode() is used
  ReplyCache cache;
  const int64_t me = ::getpid();
  uint64_t id = 1;
  send(s, kSenders[0], *test::sample_request(proto::MsgType::kReserve, kRootJob, id++, me, 16));
  send(s, kSenders[0],
       proto::encode(id++, proto::StoreSet{kRootJob, "secret", kSecret, std::nullopt}));
  if (owners_of(s, kRootJob) != std::set<int64_t>{0}) die("setup: root's job was not created");

  const auto table = proto::message_table();
  for (size_t i = 0; i + 3 <= size; i += 3) {
    const auto& row = table[data[i] % table.size()];
    const Sender& who = kSenders[data[i + 1] % std::size(kSenders)];
    const uint8_t v = data[i + 2];
    const std::string job = v & 0x80 ? "other" : kRootJob;
    auto frame = test::sample_request(row.type, job, id++, me, v & 0x7f);
    if (!frame) {
      muster::codec::Buffer empty;
      muster::codec::Packer(empty).pack_map(0);
      frame = proto::encode_raw(id - 1, static_cast<uint16_t>(row.type), empty);
    }
    const bool stranger = !who.peer && who.uid > 0;
    const auto owners = owners_of(s, job);
    // Naming another user's job while it has none of its own of that name,
    // or a request only root may send (a GPU drain).
    const bool others = std::any_of(owners.begin(), owners.end(),
                                    [&](int64_t o) { return o >= 0 && o != who.uid; });
    const bool attack =
        stranger && (row.scope & proto::kScopeLocal) &&
        ((row.sender == proto::Sender::kJobOwner && others && !owners.count(who.uid)) ||
         row.sender == proto::Sender::kAdmin);
    const std::string before = attack ? file.encode(s, cache) : std::string();
    Answer a = send(s, who, *frame);
    std::string what = std::string(row.name) + " from " + who.name + " on job '" + job + "'";
    for (size_t k = 0; k < a.replies.size(); ++k) {
      const auto& env = a.replies[k];
      if (env.type == static_cast<uint16_t>(proto::MsgType::kErrorReply)) {
        auto e = proto::ErrorReply::unpack(env.payload);
        if (static_cast<ErrorCode>(e.code) == ErrorCode::kInternal)
          die(what + ": internal error: " + e.message);
      }
      if (!stranger) continue;
      if (a.frames[k].find(kSecret) != std::string::npos) die(what + ": the secret leaked");
      if (env.type == static_cast<uint16_t>(proto::MsgType::kStatusReply)) {
        auto st = proto::StatusReply::unpack(env.payload);
        // Jobs made by in-process callers (uid -1) belong to nobody and are
        // everyone's to see; the server never makes one.
        std::set<std::string> visible;
        for (const auto& j : st.jobs) {
          if (j.uid >= 0 && j.uid != who.uid) die(what + ": status shows job '" + j.id + "'");
          visible.insert(j.id);
        }
        for (const auto& d : st.devices)
          if ((!d.job.empty() && !visible.count(d.job)) || (d.job.empty() && d.pid != 0))
            die(what + ": status shows who holds GPU " + std::to_string(d.index));
      }
    }
    if (!attack) continue;
    if (a.replies.size() != 1) die(what + ": not exactly one reply");
    auto& env = a.replies[0];
    // A request only root may send is permission_denied. The name is the
    // stranger's own namespace, where the other user's job is not: answered
    // as a missing job (unknown_job); a request that would create one of
    // its own there claims root's pid (the samples' pid): permission_denied.
    ErrorCode want = row.sender == proto::Sender::kAdmin || row.creates_job
                         ? ErrorCode::kPermissionDenied
                         : ErrorCode::kUnknownJob;
    if (env.type != static_cast<uint16_t>(proto::MsgType::kErrorReply)) die(what + ": not refused");
    const auto e = proto::ErrorReply::unpack(env.payload);
    if (static_cast<ErrorCode>(e.code) != want)
      die(what + ": refused with code " + std::to_string(e.code) + " (" + e.message + "), not " +
          std::to_string(static_cast<int>(want)));
    if (a.to_links != 0) die(what + ": sent on to a coordinator");
    if (file.encode(s, cache) != before) die(what + ": changed the state");
  }
  std::vector<Outgoing> out;
  s.cancel_all(out);
  return 0;
}
