// The message table (common/protocol/message_table.hpp) against the two
// things that must agree with it: doc/protocol.md's "Who may do what", which
// users read, and daemon::State, which enforces it. The second drives a
// State directly (no sockets) with a valid request of every type from every
// kind of sender, against a job that root owns and a secret in its store,
// and checks each answer against the row: a stranger's request that names
// root's job is refused as if there were no such job (unknown_job; conflict
// for a request that would create it) and changes nothing (the
// state's saved bytes are compared), a status shows a stranger nothing of
// it, peer messages are refused on the local socket, replies are never
// requests.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "cluster/multi_node.hpp"
#include "core/state.hpp"
#include "persist/reply_cache.hpp"
#include "persist/state_file.hpp"
#include "protocol/message_table.hpp"
#include "support/replies.hpp"
#include "support/sample_requests.hpp"

using namespace muster;
using namespace muster::daemon;
using namespace muster::proto;

namespace {

std::string yes_no(bool b) {
  return b ? "yes" : "-";
}

// One row as doc/protocol.md prints it.
std::string doc_row(const MessageTraits& t) {
  return "| " + std::to_string(static_cast<int>(t.type)) + " | `" + t.name + "` | " +
         scope_name(t.scope) + " | " + sender_name(t.sender) + " | " + area_name(t.area) + " | " +
         yes_no(t.creates_job) + " | " + yes_no(t.fenced) + " | " + yes_no(t.forwardable) + " | " +
         claimed_pids_name(t.pids) + " | " + kept_name(t.kept) + " |";
}

// The rows of the table in doc/protocol.md's "Who may do what" section.
std::vector<std::string> documented_rows() {
  const char* path = std::getenv("MUSTER_PROTOCOL_MD");
  REQUIRE(path != nullptr);
  std::ifstream f(path);
  REQUIRE(f.good());
  std::vector<std::string> rows;
  bool in_section = false;
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line == "## Who may do what";
    if (in_section && line.size() > 2 && line[0] == '|' && std::isdigit(line[2]))
      rows.push_back(line);
  }
  return rows;
}

}  // namespace

TEST_CASE("doc/protocol.md's 'Who may do what' table is the message table, row for row") {
  auto doc = documented_rows();
  std::vector<std::string> table;
  for (const auto& t : message_table()) table.push_back(doc_row(t));
  // Printed on failure: the rows to paste.
  std::ostringstream want;
  for (const auto& r : table) want << r << "\n";
  INFO("the table's rows:\n" << want.str());
  CHECK(doc == table);
}

TEST_CASE(
    "only ping and status are open to a uid that owns no job; peers' messages only to peers") {
  std::set<std::string> open, peer;
  for (const auto& t : message_table()) {
    if (t.sender == Sender::kAnyone) open.insert(t.name);
    if (t.scope & kScopePeer) peer.insert(t.name);
    if (t.sender == Sender::kPeer) CHECK(t.scope == kScopePeer);
  }
  CHECK(open == std::set<std::string>{"ping", "status"});
  CHECK(peer == std::set<std::string>{"ping", "node_join", "forward", "heartbeat", "rank_exited",
                                      "node_leave", "barrier_up", "job_waits", "node_joins"});
}

TEST_CASE("the dispatcher's column gives every request type of the table one handler") {
  // daemon/core/dispatch.cpp and cluster/peer_requests.cpp: a type with no
  // handler, two, or a handler for a reply is named here (and stops the
  // daemon at start).
  const auto gaps = State::handler_gaps();
  INFO(gaps.size() << " gap(s), the first: " << (gaps.empty() ? "" : gaps.front()));
  CHECK(gaps.empty());
}

TEST_CASE("every type the decoder accepts has a row, and no two rows share a name") {
  std::set<std::string> names;
  for (const auto& t : message_table()) {
    CHECK(names.insert(t.name).second);
    CHECK(message_traits(static_cast<uint16_t>(t.type)) == &t);
    CHECK(std::string(type_name(static_cast<uint16_t>(t.type))) == t.name);
  }
  for (uint32_t type = 0; type <= 0xffff; ++type)
    if (type_name(static_cast<uint16_t>(type)))
      CHECK(message_traits(static_cast<uint16_t>(type)) != nullptr);
  CHECK(message_traits(0) == nullptr);
  CHECK(message_traits(999) == nullptr);
}

namespace {

const std::string kJob = "rootjob";
const std::string kSecret = "s3cr3t-value";

enum class Who { kRoot, kStranger, kOtherStranger, kInProcess, kPeerDaemon };

const char* who_name(Who w) {
  switch (w) {
    case Who::kRoot:
      return "root";
    case Who::kStranger:
      return "uid 1001";
    case Who::kOtherStranger:
      return "uid 65534";
    case Who::kInProcess:
      return "in-process";
    case Who::kPeerDaemon:
      return "peer daemon";
  }
  return "?";
}

struct Answer {
  size_t replies = 0;
  size_t to_links = 0;  // requests sent on to a coordinator
  uint16_t type = 0;
  ErrorCode code = ErrorCode::kOk;
  std::string message;
  std::string frame;
};

// A daemon state holding root's job (2 GPUs leased) with a secret in its
// store, and the coordinator's side of a job of the same name.
struct Fixture {
  PidWatch watch;
  State s{{{0, "sim0"}, {1, "sim1"}}, watch};
  StateFile file{"/nonexistent"};  // only encode() is used
  ReplyCache cache;
  uint64_t next = 1;

  Fixture() {
    s.cluster().configure("here", std::chrono::milliseconds(2000), "", 16);
    auto reserve =
        ask(Who::kRoot, *test::sample_request(MsgType::kReserve, kJob, next++, ::getpid(), 16));
    REQUIRE(reserve.type == static_cast<uint16_t>(MsgType::kReserved));
    auto set = ask(Who::kRoot, encode(next++, StoreSet{kJob, "secret", kSecret, std::nullopt}));
    REQUIRE(set.type == static_cast<uint16_t>(MsgType::kOk));
    auto join =
        ask(Who::kPeerDaemon, *test::sample_request(MsgType::kNodeJoin, kJob, next++, ::getpid()));
    REQUIRE(join.code == ErrorCode::kOk);
  }

  Answer ask(Who who, const std::string& frame) {
    ReplyTo to;
    to.routing_id = "client";
    switch (who) {
      case Who::kRoot:
        to.peer_uid = 0;
        break;
      case Who::kStranger:
        to.peer_uid = 1001;
        break;
      case Who::kOtherStranger:
        to.peer_uid = 65534;
        break;
      case Who::kInProcess:
        to.peer_uid = -1;
        break;
      case Who::kPeerDaemon:
        to.from_peer = true;
        break;
    }
    Answer a;
    for (const auto& reply : test::client_frames(test::handle_frame(s, to, frame), a.to_links)) {
      ++a.replies;
      auto r = decode_envelope(reply.data(), reply.size());
      a.type = r.type;
      a.frame = reply;
      if (r.type == static_cast<uint16_t>(MsgType::kErrorReply)) {
        auto e = ErrorReply::unpack(r.payload);
        a.code = static_cast<ErrorCode>(e.code);
        a.message = e.message;
      }
    }
    return a;
  }

  std::string snapshot() {
    auto st = s.reports().status();
    st.uptime_s = 0;  // the one thing that changes by itself
    return file.encode(s, cache) + encode(0, st);
  }
};

}  // namespace

TEST_CASE("every request type from every kind of sender is answered as its row says") {
  for (const auto& t : message_table()) {
    for (Who who :
         {Who::kRoot, Who::kStranger, Who::kOtherStranger, Who::kInProcess, Who::kPeerDaemon}) {
      for (uint8_t v : {uint8_t{0}, uint8_t{1}, uint8_t{19}}) {
        Fixture fx;
        auto frame = test::sample_request(t.type, kJob, 900, ::getpid(), v);
        if (!frame)
          frame = encode_raw(900, static_cast<uint16_t>(t.type), [] {
            codec::Buffer b;
            codec::Packer(b).pack_map(0);
            return b;
          }());
        INFO(t.name << " (variant " << int(v) << ") from " << who_name(who));
        auto before = fx.snapshot();
        auto a = fx.ask(who, *frame);
        bool stranger = who == Who::kStranger || who == Who::kOtherStranger;
        bool local = who != Who::kPeerDaemon;
        INFO("answer: " << (a.type ? type_name(a.type) : "none") << " " << error_name(a.code) << " "
                        << a.message);
        CHECK(a.code != ErrorCode::kInternal);
        if (t.sender == Sender::kNone) {
          CHECK(a.code == ErrorCode::kUnknownType);
        } else if (!local && !(t.scope & kScopePeer)) {
          CHECK(a.code == ErrorCode::kUnknownType);
        } else if (local && !(t.scope & kScopeLocal)) {
          CHECK(a.code == ErrorCode::kPermissionDenied);
        } else if (stranger && (t.sender == Sender::kJobOwner || t.sender == Sender::kAdmin)) {
          // The attack: refused at once, nothing changed, nothing sent on.
          // The job's name is the stranger's own namespace, where root's job
          // is not: answered as a job that does not exist; a request that
          // would create one of its own there is refused for the pid it
          // claims (root's).
          CHECK(a.replies == 1);
          if (t.sender == Sender::kAdmin)
            CHECK(a.code == ErrorCode::kPermissionDenied);
          else
            CHECK(a.code ==
                  (t.creates_job ? ErrorCode::kPermissionDenied : ErrorCode::kUnknownJob));
          CHECK(a.to_links == 0);
          CHECK(fx.snapshot() == before);
          continue;
        } else {
          CHECK(a.code != ErrorCode::kPermissionDenied);
        }
        // Whatever a stranger sends changes nothing of root's job and sends
        // nothing on, whatever the row says; what it is told carries
        // nothing of the job.
        if (stranger) {
          CHECK(fx.snapshot() == before);
          CHECK(a.to_links == 0);
          CHECK(a.frame.find(kSecret) == std::string::npos);
          if (t.type == MsgType::kStatus) {
            CHECK(a.frame.find(kJob) == std::string::npos);
            auto env = decode_envelope(a.frame.data(), a.frame.size());
            auto st = StatusReply::unpack(env.payload);
            CHECK(st.jobs.empty());
            REQUIRE(st.devices.size() == 2);
            for (const auto& d : st.devices) {
              CHECK(d.in_use);
              CHECK(d.job.empty());
              CHECK(d.pid == 0);
              CHECK(d.rank == -1);
            }
          }
        }
        if (who == Who::kRoot && t.type == MsgType::kStatus) {
          CHECK(a.frame.find(kJob) != std::string::npos);
        }
      }
    }
  }
}

TEST_CASE("a coordinator admits to a job only nodes whose job the same uid owns") {
  PidWatch watch;
  State s{{}, watch};
  s.cluster().configure("coord", std::chrono::milliseconds(2000), "", 16);
  auto node_join = [&](const std::string& node, int64_t owner, uint64_t id) {
    NodeJoin j{"shared-name", node, 1, -1, 2, 2, 0, 60000, "127.0.0.1", 1, "", owner};
    ReplyTo from;
    from.routing_id = node;
    from.from_peer = true;
    std::vector<std::pair<uint16_t, ErrorCode>> r;
    for (auto& o : test::handle_frame(s, from, encode(id, j))) {
      auto e = decode_envelope(o.frame.data(), o.frame.size());
      r.emplace_back(e.type, e.type == static_cast<uint16_t>(MsgType::kErrorReply)
                                 ? static_cast<ErrorCode>(ErrorReply::unpack(e.payload).code)
                                 : ErrorCode::kOk);
    }
    return r;
  };
  // Root's job waits for its second node.
  CHECK(node_join("node-a", 0, 1).empty());
  // Another user's job of the same name on another node is refused, and
  // the world does not form with it.
  auto foreign = node_join("node-b", 65534, 2);
  REQUIRE(foreign.size() == 1);
  CHECK(foreign[0].second == ErrorCode::kPermissionDenied);
  // Root's second node completes the world: both get it.
  auto world = node_join("node-c", 0, 3);
  REQUIRE(world.size() == 2);
  for (auto& [type, code] : world) CHECK(type == static_cast<uint16_t>(MsgType::kWorld));
}

TEST_CASE("a coordinator running a job itself gives its name to no other uid, first or not") {
  PidWatch watch;
  State s{{}, watch};
  s.cluster().configure("coord", std::chrono::milliseconds(2000), "", 16);
  // Root's job on the coordinator's own node, before any node joined.
  auto reserve = test::sample_request(MsgType::kReserve, "mine", 1, ::getpid(), 0);
  auto env = decode_envelope(reserve->data(), reserve->size());
  ReplyTo local;
  local.routing_id = "launcher";
  local.request_id = 1;
  local.peer_uid = 0;
  std::vector<Outgoing> out;
  s.handle(local, env, out);
  REQUIRE(out.size() == 1);
  // Another uid's node joins a job of that name first: refused.
  NodeJoin j{"mine", "squatter", 1, -1, 1, 2, 0, 60000, "127.0.0.1", 1, "", 65534};
  auto frame = encode(2, j);
  auto jenv = decode_envelope(frame.data(), frame.size());
  ReplyTo peer;
  peer.routing_id = "squatter";
  peer.from_peer = true;
  peer.request_id = 2;
  out.clear();
  s.handle(peer, jenv, out);
  REQUIRE(out.size() == 1);
  auto r = decode_envelope(out[0].frame.data(), out[0].frame.size());
  REQUIRE(r.type == static_cast<uint16_t>(MsgType::kErrorReply));
  CHECK(static_cast<ErrorCode>(ErrorReply::unpack(r.payload).code) == ErrorCode::kPermissionDenied);
}
