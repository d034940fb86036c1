#include "persist/progress_codec.hpp"

#include "muster/error.hpp"
#include "protocol/limits.hpp"
#include "protocol/messages.hpp"

namespace muster::daemon::progress_codec {

using codec::key;
using codec::MapReader;
using codec::put_str;

namespace {

std::string bytes_of(const codec::Buffer& buf) {
  return std::string(buf.data(), buf.size());
}

}  // namespace

void pack_run(codec::Packer& p, const std::string& job, const SamplerRun& run,
              const StartTime& started) {
  p.pack_map(4);
  key(p, "job"), put_str(p, job);
  key(p, "launcher"), p.pack(run.launcher_pid);
  key(p, "started"), p.pack(run.launcher_pid > 0 ? started(run.launcher_pid) : uint64_t{0});
  key(p, "samplers"), p.pack_array(static_cast<uint32_t>(run.samplers.size()));
  for (const auto& [k, s] : run.samplers) {
    p.pack_map(6);
    key(p, "dataset_size"), p.pack(s.dataset_size);
    key(p, "seed"), p.pack(s.seed);
    key(p, "shuffle"), p.pack(s.shuffle);
    key(p, "drop_last"), p.pack(s.drop_last);
    key(p, "epoch"), p.pack(s.epoch);
    key(p, "consumed"), p.pack(s.consumed);
  }
}

std::string run_record(const std::string& job, const SamplerRun& run, const StartTime& started) {
  codec::Buffer buf;
  codec::Packer p(buf);
  pack_run(p, job, run, started);
  return bytes_of(buf);
}

std::pair<std::string, SamplerRun> decode_run(const msgpack::object& o, const std::string& what) {
  MapReader r(o, what);
  std::pair<std::string, SamplerRun> out;
  out.first = r.str("job", limits::kMaxJobIdBytes);
  if (out.first.empty()) throw Error(ErrorCode::kBadMessage, what + ": no job id");
  SamplerRun& run = out.second;
  run.launcher_pid = r.i64("launcher", 0, INT32_MAX);
  run.launcher_started = r.u64("started", 0, UINT64_MAX);
  const auto& samplers = r.array("samplers", SamplerProgress::kMaxSamplersPerJob);
  for (uint32_t i = 0; i < samplers.size; ++i) {
    MapReader sr(samplers.ptr[i], what + " sampler " + std::to_string(i));
    SamplerPlace s;
    s.dataset_size = sr.u64("dataset_size", 0, proto::kMaxDatasetSize);
    s.seed = sr.u64("seed", 0, UINT64_MAX);
    s.shuffle = sr.boolean("shuffle");
    s.drop_last = sr.boolean("drop_last");
    s.epoch = sr.u64("epoch", 0, UINT64_MAX);
    s.consumed = sr.u64("consumed", 0, s.dataset_size);
    run.samplers[SamplerProgress::sampler_key(s.dataset_size, s.seed, s.shuffle)] = s;
  }
  return out;
}

std::string run_gone(const std::string& job) {
  codec::Buffer buf;
  codec::Packer p(buf);
  p.pack_map(1);
  key(p, "job"), put_str(p, job);
  return bytes_of(buf);
}

std::string decode_run_gone(const msgpack::object& o) {
  return MapReader(o, "log: sampler progress gone").str("job", limits::kMaxJobIdBytes);
}

}  // namespace muster::daemon::progress_codec
