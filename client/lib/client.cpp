#include "muster/client.hpp"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <zmq.hpp>

#include "client_impl.hpp"
#include "endpoint.hpp"
#include "trust.hpp"

namespace muster {

zmq::context_t& client_context() {
  // Never destroyed: terminating a context blocks until every socket is
  // closed, and a program that never frees its client (ctypes, a static
  // Client) must still be able to exit.
  //
  // One per process, not per program: a child forked after the parent made
  // its context has none of the context's I/O threads, so its clients would
  // never get a reply. The child makes a context of its own (the parent's
  // copy is left alone; a Client made before the fork does not work in the
  // child, as with any ZeroMQ socket).
  static std::mutex m;
  static zmq::context_t* ctx = nullptr;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(m);
  if (!ctx || owner != ::getpid()) {
    ctx = new zmq::context_t(1);
    // Each Client holds a socket and its monitor's pair (three sockets with
    // the monitor's own end); libzmq's default cap of 1023 sockets would stop
    // a process at ~340 clients (threads as ranks, the load test).
    ctx->set(zmq::ctxopt::max_sockets, 65535);
    owner = ::getpid();
  }
  return *ctx;
}

namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

int64_t env_int(const char* name, int64_t fallback, int64_t min, int64_t max) {
  auto s = env(name);
  if (s.empty()) return fallback;
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || v < min || v > max)
    throw Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + s +
                                                 "' is not an integer in [" + std::to_string(min) +
                                                 ", " + std::to_string(max) + "]");
  return v;
}

RankInfo from_wire(const proto::RankInfo& r) {
  return {r.job,
          r.rank,
          r.local_rank,
          r.world_size,
          r.local_world_size,
          r.node_rank,
          r.num_nodes,
          static_cast<int>(r.device),
          r.generation};
}

}  // namespace

Client::Client(ClientOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->opts = std::move(options);
  if (impl_->opts.endpoint.empty()) impl_->opts.endpoint = resolve_endpoint();
  if (auto s = env_int("MUSTER_TIMEOUT_S", -1, 0, limits::kMaxTimeoutMs / 1000); s >= 0)
    impl_->opts.wait_timeout = std::chrono::seconds(s);
  impl_->connect(impl_->opts.endpoint);
}

void Client::Impl::connect(const std::string& endpoint) {
  // Another user's daemon must not get our requests (issue #13). Only an
  // endpoint the user named in MUSTER_ENDPOINT may lie in a directory of
  // someone else (shared on purpose); its daemon is checked all the same.
  if (endpoint.rfind("ipc://", 0) == 0) {
    ipc = true;
    std::string path = endpoint.substr(6);
    if (path[0] != '@' && endpoint != env("MUSTER_ENDPOINT"))
      trust::check_socket_dir(ipc_dir_of(endpoint));
    trust::check_daemon(path);
  }
  sock.set(zmq::sockopt::linger, 0);
  // The daemon knows a resent request by this id (client_impl.hpp): random,
  // kept across reconnects; ZeroMQ reserves ids that start with a zero byte.
  std::random_device rd;
  std::string id = "m";
  while (id.size() < 16) id += static_cast<char>(rd());
  sock.set(zmq::sockopt::routing_id, zmq::buffer(id));
  // Events of this socket only, on an inproc address of its own. Without a
  // monitor, lost requests are still sent again on the timer.
  static std::atomic<uint64_t> serial{0};
  std::string addr = "inproc://muster-client-monitor-" + std::to_string(::getpid()) + "-" +
                     std::to_string(serial++);
  if (zmq_socket_monitor(sock.handle(), addr.c_str(),
                         ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED) == 0) {
    try {
      monitor.set(zmq::sockopt::linger, 0);
      monitor.connect(addr);
      monitoring = true;
    } catch (const zmq::error_t&) {
      zmq_socket_monitor(sock.handle(), nullptr, 0);
    }
  }
  try {
    sock.connect(endpoint);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::kInvalidArgument, "cannot use endpoint '" + endpoint + "': " + e.what());
  }
}

void Client::Impl::check_reply(const zmq::message_t& reply) {
  if (!ipc) return;
  // libzmq appends the sender's credentials, taken by the kernel when the
  // connection was made, to an ipc frame's "Peer-Address"; without them (a
  // libzmq built without SO_PEERCRED) connect()'s check stands alone.
  const char* prop = zmq_msg_gets(reply.handle(), "Peer-Address");
  int64_t uid, gid, pid;
  if (prop && trust::parse_peer_address(prop, uid, gid, pid)) {
    trust::check_reply_uid(uid, opts.endpoint);
    daemon_pid = pid;  // 0 when the daemon is outside our pid namespace
  }
}

bool Client::Impl::daemon_alive() const {
  if (daemon_pid <= 0 || lost) return false;
  // EPERM: it exists, as root's system daemon does for a user.
  return ::kill(static_cast<pid_t>(daemon_pid), 0) == 0 || errno == EPERM;
}

bool Client::Impl::reconnected() {
  bool back = false;
  while (monitoring) {
    zmq::message_t ev;
    try {
      if (!monitor.recv(ev, zmq::recv_flags::dontwait)) break;
      for (bool more = ev.more(); more;) {  // the endpoint frame
        zmq::message_t rest;
        more = monitor.recv(rest, zmq::recv_flags::dontwait) && rest.more();
      }
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      break;
    }
    if (ev.size() < sizeof(uint16_t)) continue;
    uint16_t event;
    std::memcpy(&event, ev.data(), sizeof event);
    if (event == ZMQ_EVENT_DISCONNECTED) {
      lost = true;
    } else if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED && lost) {
      lost = false;
      back = true;
    }
  }
  return back;
}

void Client::Impl::resend(const std::string& frame) {
  try {
    (void)sock.send(zmq::buffer(frame), zmq::send_flags::dontwait);
  } catch (const zmq::error_t&) {
    // EINTR or a full queue: the next resend tries again.
  }
}

Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

const std::string& Client::endpoint() const {
  return impl_->opts.endpoint;
}

std::string Client::ping() {
  return impl_->call<proto::Pong>(proto::Ping{}).version;
}

RankInfo Client::join(const JoinOptions& o) {
  proto::Join m{o.job, o.local_world_size, o.wants_gpu, static_cast<int64_t>(::getpid()),
                o.local_rank};
  impl_->info = from_wire(impl_->call<proto::RankInfo>(m));
  return *impl_->info;
}

RankInfo Client::join_from_env() {
  JoinOptions o;
  o.job = env("MUSTER_JOB_ID");
  if (o.job.empty()) o.job = env("TORCHELASTIC_RUN_ID");
  if (o.job.empty())
    throw Error(ErrorCode::kInvalidArgument,
                "MUSTER_JOB_ID is not set: start this program with `muster run`, or call join() "
                "with a job id");
  o.local_world_size =
      static_cast<uint32_t>(env_int("LOCAL_WORLD_SIZE", 1, 1, limits::kMaxLocalWorldSize));
  o.local_rank = static_cast<int>(env_int("LOCAL_RANK", -1, -1, limits::kMaxLocalWorldSize - 1));
  o.wants_gpu = env_int("MUSTER_WANTS_GPU", 1, 0, 1) == 1;
  return join(o);
}

void Client::leave() {
  impl_->call<proto::Ok>(
      proto::Leave{impl_->job(), static_cast<int64_t>(::getpid()), impl_->info->local_rank});
  impl_->info.reset();
}

bool Client::joined() const {
  return impl_->info.has_value();
}

const RankInfo& Client::rank_info() const {
  impl_->job();
  return *impl_->info;
}

void Client::barrier(const std::string& name, std::optional<std::chrono::milliseconds> timeout) {
  auto ms = impl_->wait_ms(timeout);
  impl_->call<proto::Ok>(
      proto::Barrier{impl_->job(), impl_->info->rank, name, ms, impl_->generation()},
      std::chrono::milliseconds(ms));
}

void Client::set(const std::string& key, const std::string& value) {
  impl_->call<proto::Ok>(proto::StoreSet{impl_->job(), key, value, impl_->generation()});
}

std::string Client::get(const std::string& key, std::optional<std::chrono::milliseconds> timeout) {
  auto ms = impl_->wait_ms(timeout);
  return impl_
      ->call<proto::Value>(proto::StoreGet{impl_->job(), key, ms, impl_->generation()},
                           std::chrono::milliseconds(ms))
      .value;
}

std::optional<std::string> Client::try_get(const std::string& key) {
  try {
    return impl_->call<proto::Value>(proto::StoreGet{impl_->job(), key, 0, impl_->generation()})
        .value;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) return std::nullopt;
    throw;
  }
}

int64_t Client::add(const std::string& key, int64_t delta) {
  return impl_->call<proto::Int>(proto::StoreAdd{impl_->job(), key, delta, impl_->generation()})
      .value;
}

std::string Client::compare_set(const std::string& key, const std::string& expected,
                                const std::string& desired) {
  return impl_
      ->call<proto::Value>(
          proto::StoreCompareSet{impl_->job(), key, expected, desired, impl_->generation()})
      .value;
}

bool Client::remove(const std::string& key) {
  return impl_->call<proto::Bool>(proto::StoreDelete{impl_->job(), key, impl_->generation()}).value;
}

void Client::wait(const std::vector<std::string>& keys,
                  std::optional<std::chrono::milliseconds> timeout) {
  auto ms = impl_->wait_ms(timeout);
  impl_->call<proto::Ok>(proto::StoreWait{impl_->job(), keys, ms, impl_->generation()},
                         std::chrono::milliseconds(ms));
}

Client::Reservation Client::reserve(const std::string& job, uint32_t local_world_size,
                                    bool wants_gpu, const std::vector<int>& allowed_devices,
                                    int64_t launcher_pid, uint64_t generation) {
  proto::Reserve m{job, local_world_size, wants_gpu, {}, launcher_pid, generation};
  for (int d : allowed_devices) m.devices.push_back(d);
  auto r = impl_->call<proto::Reserved>(m);
  return {r.generation, std::vector<int>(r.devices.begin(), r.devices.end())};
}

void Client::attach(const std::string& job, const std::vector<int64_t>& pids) {
  impl_->call<proto::Ok>(proto::Attach{job, pids});
}

DaemonStatus Client::status() {
  auto s = impl_->call<proto::StatusReply>(proto::Status{});
  DaemonStatus out{s.version, s.pid, s.uptime_s, {}, {}, s.peer_requests};
  for (const auto& d : s.devices)
    out.devices.push_back({d.index, d.name, d.job, d.rank, d.pid, d.in_use});
  for (const auto& j : s.jobs) {
    JobInfo ji{j.id, j.generation, j.world_size, j.local_world_size, {}, j.uid};
    for (const auto& r : j.ranks)
      ji.ranks.push_back({r.rank, r.local_rank, r.pid, static_cast<int>(r.device), r.state});
    out.jobs.push_back(std::move(ji));
  }
  return out;
}

}  // namespace muster
