#include "muster/client.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdlib>

#include "device_list.hpp"
#include "endpoint.hpp"
#include "forming.hpp"
#include "session.hpp"

namespace muster {

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
          r.generation,
          r.device_uuid};
}

}  // namespace

namespace detail {

ClientOptions Session::resolved(ClientOptions o) {
  if (o.endpoint.empty()) o.endpoint = resolve_endpoint();
  if (auto s = env_int("MUSTER_TIMEOUT_S", -1, 0, limits::kMaxTimeoutMs / 1000); s >= 0)
    o.wait_timeout = std::chrono::seconds(s);
  return o;
}

Session::Session(ClientOptions options)
    : opts_(resolved(std::move(options))),
      conn_(opts_.endpoint, opts_.request_timeout, opts_.wait_timeout) {}

Session& session_of(Client& client) {
  return *client.session_;
}

}  // namespace detail

Client::Client(ClientOptions options)
    : session_(std::make_unique<detail::Session>(std::move(options))) {}

Client::~Client() = default;
Client::Client(Client&&) noexcept = default;
Client& Client::operator=(Client&&) noexcept = default;

const std::string& Client::endpoint() const {
  return session_->options().endpoint;
}

std::string Client::ping() {
  return session_->call<proto::Pong>(proto::Ping{}).version;
}

void Client::drain_gpu(uint32_t device, const std::string& reason) {
  session_->call<proto::Ok>(proto::GpuDrain{device, true, reason});
}

void Client::undrain_gpu(uint32_t device) {
  session_->call<proto::Ok>(proto::GpuDrain{device, false, ""});
}

RankInfo Client::join(const JoinOptions& o) {
  proto::Join m{o.job, o.local_world_size, o.wants_gpu, static_cast<int64_t>(::getpid()),
                o.local_rank};
  if (o.owner >= 0) m.owner = o.owner;
  RankInfo info = from_wire(session_->call<proto::RankInfo>(m));
  // Under a scheduler's or container's CUDA_VISIBLE_DEVICES, or a cgroup
  // that lets CUDA see a subset, the ordinal is the leased GPU's position
  // among the visible ones (device_list.hpp).
  if (info.device >= 0) {
    const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
    std::vector<SeenGpu> gpus;
    for (const auto& d : status().devices) {
      if (gpus.size() <= d.index) gpus.resize(d.index + 1);
      gpus[d.index] = {d.uuid, d.pci_bus_id, lost_reason(d.reason)};
    }
    std::optional<std::vector<int64_t>> visible;
    try {
      visible = visible_gpus(cvd, gpus);
    } catch (const std::runtime_error& e) {
      throw Error(ErrorCode::kNoDevice, e.what());
    }
    int64_t ordinal = visible ? visible_ordinal(*visible, info.device) : info.device;
    if (ordinal < 0)
      throw Error(ErrorCode::kNoDevice,
                  "GPU " + std::to_string(info.device) + ", leased to this rank, is not among " +
                      (cvd ? "CUDA_VISIBLE_DEVICES='" + std::string(cvd) + "'"
                           : std::string("the GPUs CUDA can open here")) +
                      ": start the job with muster run under the same CUDA_VISIBLE_DEVICES and "
                      "cgroup, which leases only visible GPUs");
    info.device = static_cast<int>(ordinal);
  }
  session_->joined(info);
  return session_->rank();
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
  // Set by `muster run --owner` (root starting workers into another user's
  // job). The variable alone lets nobody in: the daemon takes such a join
  // only from a process that job's launcher registered.
  o.owner = env_int("MUSTER_JOB_OWNER", -1, -1, 0xffffffffLL);
  return join(o);
}

void Client::leave() {
  const RankInfo& me = session_->rank();
  session_->call<proto::Ok>(proto::Leave{me.job, static_cast<int64_t>(::getpid()), me.local_rank});
  session_->left();
}

bool Client::joined() const {
  return session_->joined();
}

const RankInfo& Client::rank_info() const {
  return session_->rank();
}

void Client::barrier(const std::string& name, std::optional<std::chrono::milliseconds> timeout) {
  auto ms = session_->wait_ms(timeout);
  session_->call<proto::Ok>(
      proto::Barrier{session_->job(), session_->rank().rank, name, ms, session_->generation()},
      std::chrono::milliseconds(ms));
}

void Client::set(const std::string& key, const std::string& value) {
  session_->call<proto::Ok>(proto::StoreSet{session_->job(), key, value, session_->generation()});
}

std::string Client::get(const std::string& key, std::optional<std::chrono::milliseconds> timeout) {
  auto ms = session_->wait_ms(timeout);
  return session_
      ->call<proto::Value>(proto::StoreGet{session_->job(), key, ms, session_->generation()},
                           std::chrono::milliseconds(ms))
      .value;
}

std::optional<std::string> Client::try_get(const std::string& key) {
  try {
    return session_
        ->call<proto::Value>(proto::StoreGet{session_->job(), key, 0, session_->generation()})
        .value;
  } catch (const Error& e) {
    if (e.code() == ErrorCode::kNotFound) return std::nullopt;
    throw;
  }
}

int64_t Client::add(const std::string& key, int64_t delta) {
  return session_
      ->call<proto::Int>(proto::StoreAdd{session_->job(), key, delta, session_->generation()})
      .value;
}

std::string Client::compare_set(const std::string& key, const std::string& expected,
                                const std::string& desired) {
  return session_
      ->call<proto::Value>(
          proto::StoreCompareSet{session_->job(), key, expected, desired, session_->generation()})
      .value;
}

bool Client::remove(const std::string& key) {
  return session_
      ->call<proto::Bool>(proto::StoreDelete{session_->job(), key, session_->generation()})
      .value;
}

void Client::wait(const std::vector<std::string>& keys,
                  std::optional<std::chrono::milliseconds> timeout) {
  auto ms = session_->wait_ms(timeout);
  session_->call<proto::Ok>(proto::StoreWait{session_->job(), keys, ms, session_->generation()},
                            std::chrono::milliseconds(ms));
}

DaemonStatus Client::status() {
  return status(std::string());
}

DaemonStatus Client::status(const std::string& job) {
  auto s = session_->call<proto::StatusReply>(proto::Status{job});
  DaemonStatus out{s.version, s.pid, s.uptime_s, {}, {}, s.peer_requests, s.containment};
  out.gpu_source = s.gpu_source;
  out.jobs_left_out = s.jobs_left_out;
  for (const auto& d : s.devices)
    out.devices.push_back({d.index, d.name, d.job, d.rank, d.pid, d.in_use, d.uuid, d.pci_bus_id,
                           d.numa_node, d.health, d.reason, d.drain, d.cpu_affinity, d.nvlinks,
                           d.paths, d.owner});
  for (const auto& j : s.jobs) {
    JobInfo ji{j.id,
               j.generation,
               j.world_size,
               j.local_world_size,
               {},
               j.uid,
               detail::from_wire(j.forming),
               j.numa_binding,
               {},
               j.job_wide};
    ji.ranks_left_out = j.ranks_left_out;
    ji.waits_left_out = j.waits_left_out;
    for (const auto& w : j.waits) ji.waits.push_back(detail::from_wire(w));
    for (const auto& r : j.ranks)
      ji.ranks.push_back(
          {r.rank, r.local_rank, r.pid, static_cast<int>(r.device), r.state, r.cpus});
    out.jobs.push_back(std::move(ji));
  }
  return out;
}

}  // namespace muster
