#include "support/as_user.hpp"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <zmq.hpp>

#include "protocol/cluster_messages.hpp"

namespace muster::test {

using namespace std::chrono_literals;

bool root() {
  return ::geteuid() == 0;
}

bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

std::string describe_status(const proto::StatusReply& s) {
  std::string out = "jobs=";
  for (size_t i = 0; i < s.jobs.size(); ++i) {
    const auto& j = s.jobs[i];
    out += (i ? ";" : "") + j.id + "/uid=" + std::to_string(j.uid) + "/ranks=";
    for (size_t k = 0; k < j.ranks.size(); ++k)
      out += (k ? "," : "") + std::to_string(j.ranks[k].pid) + ":" +
             std::to_string(j.ranks[k].device) + ":" + j.ranks[k].state;
  }
  out += " devices=";
  for (size_t i = 0; i < s.devices.size(); ++i) {
    const auto& d = s.devices[i];
    out += (i ? "," : "") + std::to_string(d.index) + ":in_use=" + (d.in_use ? "1" : "0") +
           ":job=" + d.job + ":rank=" + std::to_string(d.rank) + ":pid=" + std::to_string(d.pid);
  }
  return out;
}

std::string describe(const std::string& frame) {
  try {
    auto env = proto::decode_envelope(frame.data(), frame.size());
    switch (static_cast<proto::MsgType>(env.type)) {
      case proto::MsgType::kErrorReply: {
        auto e = proto::ErrorReply::unpack(env.payload);
        return std::string("error=") + error_name(static_cast<ErrorCode>(e.code)) + " " + e.message;
      }
      case proto::MsgType::kRankInfo: {
        auto r = proto::RankInfo::unpack(env.payload);
        return "reply=rank_info rank=" + std::to_string(r.rank) +
               " generation=" + std::to_string(r.generation);
      }
      case proto::MsgType::kValue:
        return "reply=value value=" + proto::Value::unpack(env.payload).value;
      case proto::MsgType::kInt:
        return "reply=int value=" + std::to_string(proto::Int::unpack(env.payload).value);
      case proto::MsgType::kBool:
        return std::string("reply=bool value=") +
               (proto::Bool::unpack(env.payload).value ? "true" : "false");
      case proto::MsgType::kClusterStateReply: {
        auto e = proto::ClusterStateReply::unpack(env.payload).event;
        return "reply=cluster_state_reply job=" + e.job +
               " generation=" + std::to_string(e.generation) + " state=" + e.state +
               " message=" + e.message;
      }
      case proto::MsgType::kWorld: {
        auto w = proto::World::unpack(env.payload);
        return "reply=world generation=" + std::to_string(w.generation) +
               " node_rank=" + std::to_string(w.node_rank) +
               " num_nodes=" + std::to_string(w.num_nodes) +
               " world_size=" + std::to_string(w.world_size);
      }
      case proto::MsgType::kHeartbeatAck: {
        std::string out = "reply=heartbeat_ack";
        for (const auto& e : proto::HeartbeatAck::unpack(env.payload).events)
          out += " job=" + e.job + " state=" + e.state + " heard_ms=" + std::to_string(e.heard_ms);
        return out;
      }
      case proto::MsgType::kBcastChunk: {
        auto c = proto::BcastChunk::unpack(env.payload);
        return "reply=bcast_chunk index=" + std::to_string(c.index) +
               " bytes=" + std::to_string(c.data.size());
      }
      case proto::MsgType::kStatusReply:
        return "reply=status_reply " + describe_status(proto::StatusReply::unpack(env.payload));
      default:
        return std::string("reply=") + proto::type_name(env.type);
    }
  } catch (const std::exception& e) {
    return std::string("undecodable: ") + e.what();
  }
}

struct RawClient::Impl {
  zmq::context_t ctx;
  zmq::socket_t s{ctx, zmq::socket_type::dealer};
};

RawClient::RawClient(const std::string& endpoint, const std::string& routing_id,
                     std::chrono::milliseconds reconnect_ivl)
    : impl_(std::make_unique<Impl>()) {
  auto& s = impl_->s;
  s.set(zmq::sockopt::linger, 0);
  if (!routing_id.empty()) s.set(zmq::sockopt::routing_id, zmq::buffer(routing_id));
  if (reconnect_ivl.count() > 0)
    s.set(zmq::sockopt::reconnect_ivl, static_cast<int>(reconnect_ivl.count()));
  s.connect(endpoint);
}

RawClient::~RawClient() = default;

void RawClient::send(const std::string& frame) {
  impl_->s.send(zmq::buffer(frame));
}

std::optional<std::string> RawClient::recv_frame(std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{impl_->s.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) <= 0) return std::nullopt;
  zmq::message_t reply;
  if (!impl_->s.recv(reply, zmq::recv_flags::dontwait)) return std::nullopt;
  return reply.to_string();
}

std::string RawClient::recv(std::chrono::milliseconds timeout) {
  auto f = recv_frame(timeout);
  return f ? describe(*f) : "no reply";
}

std::string RawClient::ask(const std::string& frame, std::chrono::milliseconds timeout) {
  send(frame);
  return recv(timeout);
}

std::optional<std::string> ask_frame(const std::string& endpoint, const std::string& frame,
                                     const AskOptions& opt) {
  RawClient c(endpoint, opt.routing_id);
  c.send(frame);
  return c.recv_frame(opt.timeout);
}

std::string ask(const std::string& endpoint, const std::string& frame, const AskOptions& opt) {
  auto f = ask_frame(endpoint, frame, opt);
  return f ? describe(*f) : "no reply";
}

std::string hex(const std::string& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += digits[c >> 4];
    out += digits[c & 15];
  }
  return out;
}

std::string unhex(const std::string& text) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::runtime_error(std::string("not a hex digit: '") + c + "'");
  };
  if (text.size() % 2) throw std::runtime_error("odd number of hex digits: '" + text + "'");
  std::string out;
  for (size_t i = 0; i < text.size(); i += 2)
    out += static_cast<char>(nibble(text[i]) << 4 | nibble(text[i + 1]));
  return out;
}

proto::StatusReply status_of(const std::string& frame) {
  auto env = proto::decode_envelope(frame.data(), frame.size());
  if (env.type != static_cast<uint16_t>(proto::MsgType::kStatusReply))
    throw std::runtime_error("expected a status_reply, got " + describe(frame));
  return proto::StatusReply::unpack(env.payload);
}

void open_to_everyone(const TestDaemon& d) {
  for (auto [path, mode] :
       {std::pair{d.runtime_dir(), 0711}, std::pair{d.runtime_dir() + "/musterd.sock", 0666}})
    if (::chmod(path.c_str(), static_cast<mode_t>(mode)) != 0)
      throw std::runtime_error("chmod " + path + ": " + std::strerror(errno));
}

UidChild::UidChild(int r, int e, int s) {
  int ready[2];
  if (::pipe(ready) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  pid = ::fork();
  if (pid < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    ::close(ready[0]);
    if (r >= 0 && ::setresuid(r, e, s) != 0) ::_exit(3);
    (void)!::write(ready[1], "x", 1);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  char c = 0;
  const bool up = ::read(ready[0], &c, 1) == 1;
  ::close(ready[0]);
  if (!up) {
    ::waitpid(pid, nullptr, 0);
    throw std::runtime_error("the child did not take uids " + std::to_string(r) + "/" +
                             std::to_string(e) + "/" + std::to_string(s));
  }
}

UidChild::~UidChild() {
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

std::function<void(Lines&)> holding_job(const std::string& endpoint, const std::string& job,
                                        uint32_t local_world_size, const std::string& key,
                                        const std::string& value, int64_t local_rank) {
  return [=](Lines& io) {
    io.say(ask(endpoint, proto::encode(1, proto::Join{job, local_world_size, false, ::getpid(),
                                                      local_rank})));
    io.say(ask(endpoint, proto::encode(2, proto::StoreSet{job, key, value})));
    io.hear();
  };
}

void Lines::say(const std::string& line) {
  std::string s = line + "\n";
  for (size_t off = 0; off < s.size();) {
    ssize_t n = ::write(out, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string Lines::hear(std::chrono::milliseconds timeout) {
  // The pipe is looked at once even when no time is left (timeout 0: a
  // line already there, without waiting).
  return read_line_from(in, buf, timeout, true).value_or("");
}

AsNobody::AsNobody(const std::function<void(Lines&)>& body, uid_t uid) {
  int down[2], up[2];
  if (::pipe2(down, O_CLOEXEC) != 0)
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(errno));
  if (::pipe2(up, O_CLOEXEC) != 0) {
    int err = errno;
    ::close(down[0]);
    ::close(down[1]);
    throw std::runtime_error(std::string("pipe2: ") + std::strerror(err));
  }
  pid_ = ::fork();
  if (pid_ < 0) {
    int err = errno;
    for (int fd : {down[0], down[1], up[0], up[1]}) ::close(fd);
    throw std::runtime_error(std::string("fork: ") + std::strerror(err));
  }
  if (pid_ == 0) {
    ::close(down[1]);
    ::close(up[0]);
    Lines io{down[0], up[1], {}};
    if (::setgroups(0, nullptr) != 0 || ::setresgid(uid, uid, uid) != 0 ||
        ::setresuid(uid, uid, uid) != 0) {
      io.say("cannot become nobody");
      ::_exit(3);
    }
    try {
      body(io);
    } catch (const std::exception& e) {
      io.say(std::string("exception: ") + e.what());
      ::_exit(2);
    }
    ::_exit(0);
  }
  ::close(down[0]);
  ::close(up[1]);
  io_ = {up[0], down[1], {}};
}

AsNobody::~AsNobody() {
  ::close(io_.out);  // a child waiting for a line sees EOF
  for (int i = 0; i < 500; ++i) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) break;
    if (i == 499) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    ::usleep(10000);
  }
  ::close(io_.in);
}

}  // namespace muster::test
