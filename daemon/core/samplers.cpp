// The samplers (samplers.hpp).
//
// Sampler shards: each rank's indices of torch's DistributedSampler, served
// from one permutation per (job, generation, dataset_size, seed + epoch) so
// that a node's ranks share the ~0.1 s randperm instead of each doing it.
//
// Wire choice: the reply carries this rank's indices as little-endian
// uint32 (uint64 when dataset_size > 2^32) in one bin. 10 M samples over 8
// ranks is 5 MB per reply, a few ms over ipc, and nothing outlives the
// request: no shared memory to name, map, unlink or leak when a job or the
// daemon dies. The price is the frame limit: a shard over ~16 M indices
// (uint32) is refused with too_large.
//
// Permutations are kept as uint32 (half the memory and ~1.4x faster to
// shuffle than int64); the 1 GiB budget caps a shuffled dataset at 2^28
// samples, so a shuffled one never needs 64-bit entries.
//
// Computing a permutation takes ~0.1 s for 10 M samples, a few seconds at
// the 2^28 cap: too long for the daemon's one loop, which would keep every
// other request waiting. So a request that finds no permutation in the
// cache is parked (ShardWaits: the ranks that ask meanwhile wait on the
// same computation), the permutation is computed on the Permuter's worker
// thread (core/permuter.hpp, server/permute_thread.hpp), and the loop
// answers the parked requests when it is told the result is there. All
// state stays on the loop's thread; the worker only fills an array from
// (n, seed). Parked requests are failed when their job ends (as its store
// waits are) and when the daemon stops, and forgotten with a client that
// reads no replies (Store::forget_client).
#include <bit>
#include <cstring>

#include "core/out_answers.hpp"
#include "core/samplers.hpp"
#include "log.hpp"
#include "protocol/limits.hpp"
#include "protocol/sampler_messages.hpp"
#include "sampler/sampler.hpp"

namespace muster::daemon {

namespace {

// Room for the envelope and the reply's other fields within one frame.
constexpr size_t kMaxShardBytes = limits::kMaxFrameBytes - 4096;

// Writes count indices of `width` bytes, little-endian, to dst, where index
// k is base(position k of this rank) among the entries after spec.consumed,
// with torch's padding by cycling those (common/sampler/sampler.hpp).
template <class Lookup>
void gather(char* dst, const ShardSpec& spec, uint64_t count, uint32_t width, Lookup base) {
  const uint64_t m = spec.dataset_size - spec.consumed;
  uint64_t pos = spec.rank;
  for (uint64_t k = 0; k < count; ++k, pos += spec.num_replicas) {
    const auto v = static_cast<uint64_t>(base(spec.consumed + (pos < m ? pos : pos % m)));
    if (width == 4) {
      auto x = static_cast<uint32_t>(v);
      if constexpr (std::endian::native == std::endian::big) x = __builtin_bswap32(x);
      std::memcpy(dst + k * 4, &x, 4);
    } else {
      uint64_t x = v;
      if constexpr (std::endian::native == std::endian::big) x = __builtin_bswap64(x);
      std::memcpy(dst + k * 8, &x, 8);
    }
  }
}

// The shard_reply frame, indices written in place: one allocation, one pass
// (a ShardReply through proto::encode would copy the bytes three times).
template <class Lookup>
std::string shard_frame(uint64_t request_id, const ShardSpec& spec, uint64_t count, uint32_t width,
                        Lookup base) {
  codec::Buffer head;
  codec::Packer p(head);
  proto::ShardReply::pack_head(p, count, width, count * width);
  std::string frame =
      proto::encode_raw(request_id, static_cast<uint16_t>(proto::ShardReply::kType), head);
  const size_t at = frame.size();
  frame.resize(at + count * width);
  gather(frame.data() + at, spec, count, width, base);
  return frame;
}

}  // namespace

void Samplers::shard(const Request& r) {
  const ReplyTo& to = r.to;
  std::vector<Outgoing>& out = r.out;
  auto m = r.unpack<proto::Shard>();
  Job& job = jobs_.get(m.job);
  if (m.rank >= job.world_size())
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(m.rank) +
                                                 " is outside job '" + m.job + "' of world size " +
                                                 std::to_string(job.world_size()));
  ShardSpec spec;
  spec.dataset_size = m.dataset_size;
  spec.epoch = m.epoch;
  spec.seed = m.seed;
  spec.shuffle = m.shuffle;
  spec.drop_last = m.drop_last;
  spec.num_replicas = job.world_size();
  spec.rank = m.rank;
  spec.consumed = m.consumed;
  if (m.consumed > m.dataset_size)
    throw Error(ErrorCode::kInvalidArgument, "consumed " + std::to_string(m.consumed) +
                                                 " is over dataset_size " +
                                                 std::to_string(m.dataset_size));
  const uint64_t n = m.dataset_size;
  const uint64_t count = shard_size(spec);
  const uint32_t width = n <= (uint64_t{1} << 32) ? 4 : 8;
  if (count > kMaxShardBytes / width)
    throw Error(ErrorCode::kTooLarge, "rank " + std::to_string(m.rank) + "'s shard of " +
                                          std::to_string(count) + " indices needs " +
                                          mib_text(count * width) + ", more than one " +
                                          mib_text(limits::kMaxFrameBytes) +
                                          " reply can carry; use more ranks or split the dataset");

  // An empty shard (the epoch used up) needs no permutation.
  if (!m.shuffle || n == 0 || count == 0) {
    out.push_back({to, shard_frame(to.request_id, spec, count, width,
                                   [](uint64_t p) { return static_cast<int64_t>(p); })});
    return;
  }

  const uint64_t seed = m.seed + m.epoch;  // wraps like shard_indices(); low 32 bits count
  if (const uint32_t* perm = cache_.find(m.job, job.generation, n, seed)) {
    out.push_back({to, shard_frame(to.request_id, spec, count, width,
                                   [perm](uint64_t p) { return perm[p]; })});
    return;
  }
  ShardCache::check_fits(n);
  waits_.park({m.job, job.generation, n, seed}, {to, spec});
  permutations_done(out);  // starts it (InlinePermuter: and answers at once)
}

void Samplers::permutations_done(std::vector<Outgoing>& out) {
  for (;;) {
    for (auto& done : permuter_->take()) answer_parked(std::move(done), out);
    auto next = waits_.next();
    if (!next) return;
    // The room for it is taken now, so that what is cached plus what is
    // being computed stays within the budget.
    cache_.reserve(next->key.n);
    log::info("job=" + next->key.job + " computing sampler permutation n=" +
              std::to_string(next->key.n) + " seed+epoch=" + std::to_string(next->key.seed));
    permuter_->start(next->ticket, next->key.n, next->key.seed);
  }
}

void Samplers::answer_parked(Permuter::Done done, std::vector<Outgoing>& out) {
  auto f = waits_.finish(done.ticket);
  cache_.release(f.n);
  if (!f.known) return;  // its job ended meanwhile: its requests were failed then
  if (!done.perm) {
    for (const auto& p : f.waiting)
      send_error(out, p.to, ErrorCode::kInternal,
                 "musterd could not allocate the " + mib_text(f.key.n * sizeof(uint32_t)) +
                     " permutation of " + std::to_string(f.key.n) + " samples");
    return;
  }
  const uint32_t* perm = done.perm.get();
  // Kept only for the generation it was computed for (a job that ended
  // took its computations with it: ShardWaits::drop_job).
  const Job* job = jobs_.find(f.key.job);
  if (job && job->generation == f.key.generation)
    perm = cache_.insert(f.key.job, f.key.generation, f.key.n, f.key.seed, std::move(done.perm));
  const uint32_t width = f.key.n <= (uint64_t{1} << 32) ? 4 : 8;
  // Outside any request's handling (the server calls this when the worker
  // is done): what throws fails its request here, never the loop.
  for (const auto& p : f.waiting) {
    try {
      out.push_back({p.to, shard_frame(p.to.request_id, p.spec, shard_size(p.spec), width,
                                       [perm](uint64_t i) { return perm[i]; })});
    } catch (const std::exception& e) {
      send_error(out, p.to, ErrorCode::kInternal, std::string("internal error: ") + e.what());
    }
  }
}

// Resumable samplers (issue #24): sampler_commit records how far a sampler
// of the job got, sampler_resume tells a later generation of the same run.
// What is kept, and for how long, is SamplerProgress's (sampler_progress.hpp).
// Those of a job that spans nodes never reach these handlers: they are
// forwarded to its coordinator (cluster/coord_samplers.cpp).
void Samplers::resume(const Request& r) {
  auto m = r.unpack<proto::SamplerResume>();
  const Job& job = jobs_.get(m.job);
  proto::SamplerPlace place;
  if (const auto* p = progress_.find(m.job, job.launcher_pid, m.dataset_size, m.seed, m.shuffle))
    place = {true, p->epoch, p->consumed, p->drop_last};
  r.reply(place);
}

void Samplers::commit(const Request& r) {
  auto m = r.unpack<proto::SamplerCommit>();
  const Job& job = jobs_.get(m.job);
  if (m.rank >= job.world_size())
    throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(m.rank) +
                                                 " is outside job '" + m.job + "' of world size " +
                                                 std::to_string(job.world_size()));
  const SamplerPlace place{m.dataset_size, m.seed, m.shuffle, m.drop_last, m.epoch, m.consumed};
  const int64_t launcher = job.launcher_pid;
  // A new entry lives as long as its launcher: watched from now on, and
  // dropped in on_pid_exit. A launcher already gone takes its entry along.
  if (progress_.commit(m.job, launcher, place) && launcher > 0 && !watch_.watch(launcher))
    progress_.launcher_ended(launcher);
  r.reply(proto::Ok{});
}

bool Samplers::restore_progress(const std::string& job, SamplerRun run) {
  if (run.launcher_pid > 0 ? !watch_.watch(run.launcher_pid) : !jobs_.find(job)) return false;
  progress_.restore(job, std::move(run));
  return true;
}

void Samplers::job_ended(const std::string& id, const std::string& why,
                         std::vector<Outgoing>& out) {
  for (const auto& p : waits_.drop_job(id)) send_error(out, p.to, ErrorCode::kPeerExited, why);
  cache_.drop(id);
  progress_.job_ended(id);  // kept for the next generation only under a launcher
}

void Samplers::cancel_all(std::vector<Outgoing>& out) {
  for (const auto& p : waits_.drop_all())
    send_error(out, p.to, ErrorCode::kShuttingDown, "musterd is stopping");
}

}  // namespace muster::daemon
