// A valid request of every type the message table knows, naming a given
// job, for tests and fuzz targets that go through the table row by row
// (tests/test_message_table.cpp, tests/fuzz/fuzz_access.cpp). `pid` is what
// requests that claim a pid claim; `v` varies the other fields a little, so
// a fuzzer can reach more than one shape of each request. Header-only, as
// the fuzz targets (tests/fuzz/meson.build) link no test library.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "protocol/cluster_messages.hpp"
#include "protocol/envelope.hpp"
#include "protocol/sampler_messages.hpp"
#include "protocol/store_messages.hpp"

namespace muster::test {

// nullopt for reply types (there is no request to make of them).
inline std::optional<std::string> sample_request(proto::MsgType type, const std::string& job,
                                                 uint64_t request_id, int64_t pid, uint8_t v = 0) {
  using namespace proto;
  const std::string key = v & 1 ? "secret" : "k" + std::to_string(v);
  const int64_t wait = v & 2 ? 50 : 0;
  std::optional<uint64_t> gen;
  if (v & 4) gen = v & 8 ? 1 : 0;
  auto e = [&](const auto& m) { return std::optional<std::string>(encode(request_id, m)); };
  switch (type) {
    case MsgType::kPing:
      return e(Ping{});
    case MsgType::kJoin:
      return e(Join{job, 2, (v & 16) != 0, pid, v & 32 ? 1 : -1});
    case MsgType::kLeave:
      return e(Leave{job, pid, static_cast<uint32_t>(v & 1)});
    case MsgType::kReserve:
      return e(Reserve{job, 2, (v & 16) != 0, {}, pid, 0});
    case MsgType::kAttach:
      return e(Attach{job, {pid, pid}});
    case MsgType::kStoreSet:
      return e(StoreSet{job, key, "injected", gen});
    case MsgType::kStoreGet:
      return e(StoreGet{job, key, wait, gen});
    case MsgType::kStoreAdd:
      return e(StoreAdd{job, key, 7, gen});
    case MsgType::kStoreCompareSet:
      return e(StoreCompareSet{job, key, "", "injected", gen});
    case MsgType::kStoreDelete:
      return e(StoreDelete{job, key, gen});
    case MsgType::kStoreWait:
      return e(StoreWait{job, {key}, wait, gen});
    case MsgType::kBarrier:
      return e(Barrier{job, static_cast<uint32_t>(v & 1), "b", wait, gen});
    case MsgType::kStatus:
      return e(Status{});
    case MsgType::kGpuDrain:
      return e(GpuDrain{static_cast<uint32_t>(v & 1), (v & 16) == 0, v & 16 ? "" : "maintenance"});
    case MsgType::kShard:
      return e(Shard{job, static_cast<uint32_t>(v & 1), 100, v, 42, (v & 16) != 0, false});
    case MsgType::kSamplerCommit:
      return e(SamplerCommit{job, static_cast<uint32_t>(v & 1), 100, 42, (v & 16) != 0, false, v,
                             v & 2 ? 100u : 3u});
    case MsgType::kSamplerResume:
      return e(SamplerResume{job, 100, 42, (v & 16) != 0});
    case MsgType::kRendezvous:
      return e(Rendezvous{job, v & 16 ? "127.0.0.1:9" : "127.0.0.1:29400", -1, 1, 2, 100, 1000,
                          "127.0.0.1", 29500});
    case MsgType::kClusterState:
      return e(ClusterState{job});
    case MsgType::kNodeJoin:
      // Root's job on the joining node (v & 32: another uid's).
      return e(NodeJoin{job, "node-x", 2, -1, 1, 2, 100, 1000, "127.0.0.1", 29500, "",
                        v & 32 ? 65534 : 0});
    case MsgType::kForward:
      // v & 32: a sampler commit for the coordinator's progress of the job.
      return e(Forward{job, 0,
                       v & 32 ? encode(1, SamplerCommit{job, v & 1u, 100, 42, true, false, 0, 3})
                              : encode(1, StoreSet{job, key, "injected", std::nullopt}),
                       (v & 16) != 0});
    case MsgType::kHeartbeat:
      return e(Heartbeat{"node-x", {{job, 0}}});
    case MsgType::kRankExited:
      return e(RankExited{job, 0, 0, "killed"});
    case MsgType::kNodeLeave:
      return e(NodeLeave{job, 0, "node-x"});
    case MsgType::kJobWaits:
      return e(JobWaits{job, 0, "node-x"});
    case MsgType::kNodeJoins:
      // Two joins of a relay's children (v & 32: one of another job).
      return e(NodeJoins{
          job,
          {{encode(7, NodeJoin{job, "node-y", 2, -1, 1, 2, 100, 1000, "127.0.0.1", 29500, "", 0})},
           {encode(8, NodeJoin{v & 32 ? "other" : job, "node-z", 2, -1, 1, 2, 100, 1000,
                               "127.0.0.1", 29500, "", 0})}}});
    case MsgType::kBarrierUp:
      return e(BarrierUp{job, 0, "b", 1, wait, (v & 16) != 0});
    case MsgType::kBcastPush:
      return e(BcastPush{job, 0, 1, 0, 5, kMinBcastChunk, 0, 0, "bytes", wait});
    case MsgType::kBcastPull:
      return e(BcastPull{job, 0, 1, 0, 1, 5, kMinBcastChunk, 0, 0, wait});
    case MsgType::kBcastLeave:
      return e(BcastLeave{job, 0, 1, 0, 1, 5, kMinBcastChunk, "gave up"});
    case MsgType::kStoreNumKeys:
      return e(StoreNumKeys{job, v & 1 ? "se" : "", gen});
    case MsgType::kStoreAppend:
      return e(StoreAppend{job, key, "injected", gen});
    case MsgType::kStoreMultiSet:
      return e(StoreMultiSet{job, {{key, "injected"}, {"k2", "x"}}, gen});
    case MsgType::kStoreMultiGet:
      return e(StoreMultiGet{job, {key}, wait, gen});
    case MsgType::kStoreQueuePush:
      return e(StoreQueuePush{job, key, "injected", gen});
    case MsgType::kStoreQueuePop:
      return e(StoreQueuePop{job, key, wait, gen});
    case MsgType::kStoreQueueLen:
      return e(StoreQueueLen{job, key, gen});
    case MsgType::kStoreListKeys:
      return e(StoreListKeys{job, "", gen});
    default:
      return std::nullopt;
  }
}

}  // namespace muster::test
