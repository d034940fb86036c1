// The bytes of the resumable samplers' progress in the state file (one
// entry per job's run, core/sampler_progress.hpp): an array in the snapshot
// and a record per changed entry in the change log (state_codec.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>

#include "core/sampler_progress.hpp"
#include "protocol/codec.hpp"

namespace muster::daemon::progress_codec {

// The launcher's start time (/proc/PID/stat field 22), cached by the caller.
using StartTime = std::function<uint64_t(int64_t pid)>;

// One run as a map {job, launcher, started, samplers}.
void pack_run(codec::Packer& p, const std::string& job, const SamplerRun& run,
              const StartTime& started);
std::string run_record(const std::string& job, const SamplerRun& run, const StartTime& started);
// Throws Error(kBadMessage) when the map does not decode; `started` of the
// result is the launcher's saved start time.
std::pair<std::string, SamplerRun> decode_run(const msgpack::object& o, const std::string& what);
std::string run_gone(const std::string& job);
std::string decode_run_gone(const msgpack::object& o);

}  // namespace muster::daemon::progress_codec
