// Test support for the access tests (test_security.cpp, test_access.cpp):
// raw requests on a DEALER of the test's choosing (routing id, kept open or
// not), their replies as one line, and a forked child that drops to nobody
// (65534) and talks to the test over a pair of pipes. Nothing here uses
// Catch2: a failure throws std::runtime_error, which Catch2 reports.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "protocol/envelope.hpp"
#include "support/process.hpp"

namespace muster::test {

inline constexpr uid_t kNobody = 65534;
// A second user besides nobody (the hostile tests' victim that is not root).
inline constexpr uid_t kSecondUser = 65533;

bool root();

bool starts_with(const std::string& s, const std::string& prefix);

// A reply frame as one line: "error=NAME MESSAGE", or "reply=TYPE" plus the
// fields the tests look at (rank_info: rank, generation; value: value; int
// and bool: value; cluster_state_reply: job, generation, state, message;
// world: generation, node_rank, num_nodes, world_size; status_reply: jobs
// and devices, see describe_status). "undecodable: WHY" when it is no
// envelope.
std::string describe(const std::string& frame);
// jobs=ID/uid=U/ranks=PID:DEVICE:STATE,...;... devices=INDEX:in_use=0|1:
// job=J:rank=R:pid=P,...
std::string describe_status(const proto::StatusReply& s);

struct AskOptions {
  // ZMQ_ROUTING_ID of the DEALER; empty: ZeroMQ picks one (starting with a
  // zero byte, so the daemon's reply cache does not track it).
  std::string routing_id;
  std::chrono::milliseconds timeout{10000};
};

// One request on a fresh DEALER (and a fresh ZeroMQ context: safe in a
// forked child); the reply frame, or nullopt after the timeout.
std::optional<std::string> ask_frame(const std::string& endpoint, const std::string& frame,
                                     const AskOptions& opt = {});
// The same, the reply as describe() writes it, or "no reply".
std::string ask(const std::string& endpoint, const std::string& frame, const AskOptions& opt = {});

// A DEALER kept open between requests (its own ZeroMQ context: usable in a
// forked child): parked requests, a connection another one may try to take
// over.
class RawClient {
 public:
  // reconnect_ivl: ZMQ_RECONNECT_IVL; 0 keeps ZeroMQ's default (100 ms).
  explicit RawClient(const std::string& endpoint, const std::string& routing_id = "",
                     std::chrono::milliseconds reconnect_ivl = std::chrono::milliseconds(0));
  ~RawClient();
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  void send(const std::string& frame);
  // The next reply frame, or nullopt after the timeout.
  std::optional<std::string> recv_frame(std::chrono::milliseconds timeout);
  // The next reply as describe() writes it, or "no reply".
  std::string recv(std::chrono::milliseconds timeout);
  // send() then recv().
  std::string ask(const std::string& frame,
                  std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Bytes as lowercase hex and back (a frame on one line through Lines).
std::string hex(const std::string& bytes);
std::string unhex(const std::string& text);

// A reply frame that must be a status_reply (throws otherwise).
proto::StatusReply status_of(const std::string& frame);

// Lets nobody reach a daemon that root started: the runtime dir is 0700
// (mkdtemp) and the socket 0660.
void open_to_everyone(const TestDaemon& d);

// A private musterd (with these arguments) that every user may reach
// (open_to_everyone), for the tests in which other users talk to it; the
// arguments are TestDaemon's.
class OpenDaemon : public TestDaemon {
 public:
  explicit OpenDaemon(std::vector<std::string> extra_args = {},
                      std::map<std::string, std::string> env = {},
                      std::vector<std::string> wrapper = {})
      : TestDaemon(std::move(extra_args), std::move(env), std::move(wrapper)) {
    open_to_everyone(*this);
  }
};

// A forked child that takes these real, effective and saved uids (keeps
// this process's when r is negative) and sleeps until the destructor kills
// it: a process another user may try to claim. The constructor returns once
// the child has its uids.
struct UidChild {
  pid_t pid = -1;
  UidChild(int r, int e, int s);
  ~UidChild();
  UidChild(const UidChild&) = delete;
  UidChild& operator=(const UidChild&) = delete;
};

// Line I/O over a pair of pipes, both ways between the test and its child.
struct Lines {
  int in = -1, out = -1;
  std::string buf;
  void say(const std::string& line);
  // One line, or "" at EOF or after the timeout.
  std::string hear(std::chrono::milliseconds timeout = std::chrono::milliseconds(20000));
};

// A forked child that drops to nobody (uid and gid 65534, no supplementary
// groups) and runs body; it talks to the test through Lines. The child must
// use no Catch2 macro and no libmuster Client (whose process-wide ZeroMQ
// context does not survive fork): raw requests through ask() and RawClient
// only. The destructor closes the child's input (a child waiting for a line
// sees EOF) and reaps it, killing it after 5 s.
class AsNobody {
 public:
  // uid: the user the child becomes (uid and gid), nobody unless said.
  explicit AsNobody(const std::function<void(Lines&)>& body, uid_t uid = kNobody);
  ~AsNobody();
  AsNobody(const AsNobody&) = delete;
  AsNobody& operator=(const AsNobody&) = delete;

  pid_t pid() const { return pid_; }
  std::string hear(std::chrono::milliseconds timeout = std::chrono::milliseconds(20000)) {
    return io_.hear(timeout);
  }
  void say(const std::string& line) { io_.say(line); }

 private:
  pid_t pid_ = -1;
  Lines io_;
};

// The body of an AsNobody child that joins `job` (local_world_size ranks,
// no GPU, as local_rank) and sets key to value in the job's store, saying
// both replies, then holds the job until the test says a line (or ends).
std::function<void(Lines&)> holding_job(const std::string& endpoint, const std::string& job,
                                        uint32_t local_world_size, const std::string& key,
                                        const std::string& value, int64_t local_rank = 0);

}  // namespace muster::test
