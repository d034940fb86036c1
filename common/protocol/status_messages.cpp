// The fields of a status reply's parts (status_messages.hpp) and of the
// waits it lists (wait_messages.hpp), walked by fields.hpp.
#include "protocol/status_messages.hpp"

#include "protocol/fields.hpp"
#include "protocol/limits.hpp"
#include "protocol/messages.hpp"

namespace muster::proto {

template <class IO>
void DeviceStatus::fields(IO& io) {
  io.num("index", index, 0, limits::kMaxDevices - 1);
  io.str("name", name, 256);
  io.str("job", job, limits::kMaxJobIdBytes);
  io.num("rank", rank, -1, kU32Max);
  io.num("pid", pid, 0, limits::kMaxPid);
  // Optional on the wire (older daemons): a device with a job is in use.
  io.if_absent(in_use, !job.empty());
  io.boolean("in_use", in_use, wire::kAddedLater);
  io.str("uuid", uuid, 96, wire::kAddedLater);
  io.str("pci_bus_id", pci_bus_id, 32, wire::kAddedLater);
  io.num("numa_node", numa_node, -1, kU32Max, wire::kAddedLater);
  io.str("cpu_affinity", cpu_affinity, 4096, wire::kAddedLater);
  io.ints("nvlinks", nvlinks, limits::kMaxDevices, 0, 1024, wire::kAddedLater);
  io.ints("paths", paths, limits::kMaxDevices, 0, 100, wire::kAddedLater);
  io.str("health", health, 32, wire::kAddedLater);
  io.str("reason", reason, 1024, wire::kAddedLater);
  io.str("drain", drain, 1024, wire::kAddedLater);
  io.num("owner", owner, -1, kU32Max, wire::kAddedLater);
}

template <class IO>
void RankStatus::fields(IO& io) {
  io.num("rank", rank, 0, kU32Max);
  io.num("local_rank", local_rank, 0, kU32Max);
  io.num("pid", pid, 0, limits::kMaxPid);
  io.num("device", device, -1, limits::kMaxDevices - 1);
  io.str("state", state, 32);
  io.str("cpus", cpus, kMaxCpusText, wire::kAddedLater);
}

template <class IO>
void Forming::fields(IO& io) {
  io.num("nodes", nodes, 0, 65536, wire::kUnlessDefault);
  // A name list for people: the coordinator sends every node of a large
  // round the first few only, not O(nodes) bytes each.
  io.strs("joined", joined, kMaxFormingNames, 256, wire::kUnlessDefault);
  io.num("min_nodes", min_nodes, 0, 65536, wire::kUnlessDefault);
  io.num("max_nodes", max_nodes, 0, 65536, wire::kUnlessDefault);
  io.num("last_call_ms", last_call_ms, 0, limits::kMaxTimeoutMs, wire::kUnlessDefault);
  io.num("closes_in_ms", closes_in_ms, 0, limits::kMaxTimeoutMs, wire::kUnlessDefault);
  io.check([&] {
    if (joined.size() > nodes || nodes > max_nodes || min_nodes > max_nodes)
      throw Error(ErrorCode::kInvalidArgument, "forming: " + std::to_string(nodes) + " of " +
                                                   std::to_string(min_nodes) + ".." +
                                                   std::to_string(max_nodes) + " nodes");
  });
}
// JobEvent (cluster_messages.cpp) walks it too.
template void Forming::fields(wire::Reader&);
template void Forming::fields(wire::BasicWriter<true>&);
template void Forming::fields(wire::BasicWriter<false>&);

template <class IO>
void WaitRank::fields(IO& io) {
  io.num("rank", rank, -1, kU32Max);
  io.num("node", node, -1, kU32Max);
  io.num("pid", pid, 0, limits::kMaxPid);
}

std::string bounded_wait_name(std::string name) {
  if (name.size() <= kMaxWaitNameBytes) return name;
  const size_t total = name.size();
  size_t cut = kMaxWaitNameBytes - 40;  // room for the note
  while (cut > 0 && (static_cast<unsigned char>(name[cut]) & 0xc0) == 0x80) --cut;
  name.resize(cut);
  return name + " ... (" + std::to_string(total - cut) + " more bytes)";
}

template <class IO>
void WaitStatus::fields(IO& io) {
  io.str("kind", kind, 16);
  io.str("name", name, limits::kMaxKeyBytes * 4);
  io.num("arrived", arrived, 0, UINT64_MAX);
  io.num("expected", expected, 0, UINT64_MAX);
  io.list("ranks", ranks, kMaxWaitRanks);
  io.num("age_ms", age_ms, 0, INT64_MAX);
  io.boolean("stuck", stuck);
}
// The heartbeat and job_waits (cluster_messages.cpp) carry it too.
template void WaitStatus::fields(wire::Reader&);
template void WaitStatus::fields(wire::BasicWriter<true>&);
template void WaitStatus::fields(wire::BasicWriter<false>&);

template <class IO>
void JobStatus::fields(IO& io) {
  io.str("id", id, limits::kMaxJobIdBytes);
  io.generation(generation);
  io.num("world_size", world_size, 0, kU32Max);
  io.num("local_world_size", local_world_size, 0, kU32Max);
  io.num("uid", uid, -1, kU32Max, wire::kAddedLater);
  io.str("numa_binding", numa_binding, 16, wire::kAddedLater);
  io.list("ranks", ranks, limits::kMaxLocalWorldSize);
  forming.fields(io);
  io.list("waits", waits, kMaxWaits, wire::kUnlessDefault);
  io.boolean("job_wide", job_wide, wire::kUnlessDefault);
  io.num("ranks_left_out", ranks_left_out, 0, UINT64_MAX, wire::kUnlessDefault);
  io.num("waits_left_out", waits_left_out, 0, UINT64_MAX, wire::kUnlessDefault);
}

// StatusReply (messages.cpp) walks its devices and jobs.
template void DeviceStatus::fields(wire::Reader&);
template void DeviceStatus::fields(wire::BasicWriter<true>&);
template void DeviceStatus::fields(wire::BasicWriter<false>&);
template void JobStatus::fields(wire::Reader&);
template void JobStatus::fields(wire::BasicWriter<true>&);
template void JobStatus::fields(wire::BasicWriter<false>&);

}  // namespace muster::proto
