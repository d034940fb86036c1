#include "muster/gpu.hpp"

#include <cctype>

#include "device_list.hpp"
#include "gpu_libs.hpp"
#include "muster/broadcast.hpp"

namespace muster::gpu {

namespace {
// Every CUDA and NCCL call goes through the process's own copy, found at run
// time (gpu_libs.hpp): the headers give the types, nothing is linked.
// CALL(cuda_runtime, cudaSetDevice)(args) resolves the entry point by its
// own name and type; an entry point the library lacks is an error, not a
// crash.
template <class F>
F entry(const detail::GpuLib& lib, const char* name) {
  auto f = lib.fn<F>(name);
  if (!f)
    throw Error(ErrorCode::kUnavailable,
                std::string(name) + " is missing from the library found (" + lib.where() + ")");
  return f;
}
#define CALL(lib, name) entry<decltype(&name)>(detail::lib(), #name)

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw Error(ErrorCode::kInternal,
                std::string(what) + ": " + CALL(cuda_runtime, cudaGetErrorString)(e));
}
void check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess)
    throw Error(ErrorCode::kInternal, std::string(what) + ": " + CALL(nccl, ncclGetErrorString)(r));
}
ncclUniqueId to_id(const std::string& bytes) {
  ncclUniqueId id;
  static_assert(sizeof(id.internal) == 128);
  std::copy(bytes.begin(), bytes.end(), id.internal);
  return id;
}

bool same_uuid(std::string a, std::string b) {
  auto lower = [](std::string& s) {
    for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  lower(a), lower(b);
  return a == b;
}
}  // namespace

int select_device(const RankInfo& info) {
  if (info.device < 0)
    throw Error(ErrorCode::kNoDevice, "rank " + std::to_string(info.rank) + " of job '" + info.job +
                                          "' holds no GPU lease (started with --cpu?)");
  check(CALL(cuda_runtime, cudaSetDevice)(info.device), "cudaSetDevice");
  // CUDA numbers devices fastest-first unless CUDA_DEVICE_ORDER=PCI_BUS_ID
  // (muster run sets it), and a CUDA_VISIBLE_DEVICES other than the one the
  // rank joined under renumbers them: the ordinal can open another GPU
  // than the leased one. The UUID says which one it opened.
  if (!info.device_uuid.empty() && info.device_uuid.rfind("GPU-", 0) == 0) {
    // cudaDeviceProp's layout is the headers' this file was built with; a
    // runtime of another major version (a program that loaded its own)
    // lays it out otherwise, and its UUID would be read from the wrong place.
    int runtime = 0;
    check(CALL(cuda_runtime, cudaRuntimeGetVersion)(&runtime), "cudaRuntimeGetVersion");
    if (runtime / 1000 != CUDART_VERSION / 1000)
      throw Error(ErrorCode::kUnavailable,
                  "the CUDA runtime this process uses (" + std::to_string(runtime / 1000) + "." +
                      std::to_string(runtime % 1000 / 10) + ", " + detail::cuda_runtime().where() +
                      ") is not the major version muster's GPU helpers were built for (" +
                      std::to_string(CUDART_VERSION / 1000) +
                      "): build muster against the program's CUDA toolkit");
    cudaDeviceProp prop{};
    check(CALL(cuda_runtime, cudaGetDeviceProperties)(&prop, info.device),
          "cudaGetDeviceProperties");
    if (std::string opened = gpu_uuid_text(prop.uuid.bytes); !same_uuid(opened, info.device_uuid))
      throw Error(ErrorCode::kNoDevice,
                  "rank " + std::to_string(info.rank) + " of job '" + info.job + "': CUDA device " +
                      std::to_string(info.device) + " is " + opened + ", not the leased GPU " +
                      info.device_uuid +
                      " (start ranks with muster run, or set CUDA_DEVICE_ORDER=PCI_BUS_ID and "
                      "keep the CUDA_VISIBLE_DEVICES the rank joined under)");
  }
  return info.device;
}

ncclComm_t init_communicator(Client& client, const std::string& name) {
  const auto& me = client.rank_info();
  auto id = to_id(muster::nccl_unique_id(client, name));
  ncclComm_t comm = nullptr;
  check(CALL(nccl, ncclCommInitRank)(&comm, static_cast<int>(me.world_size), id,
                                     static_cast<int>(me.rank)),
        "ncclCommInitRank");
  return comm;
}

ncclComm_t init_communicator_scalable(Client& client, uint32_t n_ids, const std::string& name) {
  const auto& me = client.rank_info();
  std::vector<ncclUniqueId> ids;
  for (const auto& b : muster::nccl_unique_ids(client, n_ids, name)) ids.push_back(to_id(b));
  ncclComm_t comm = nullptr;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  check(CALL(nccl, ncclCommInitRankScalable)(&comm, static_cast<int>(me.world_size),
                                             static_cast<int>(me.rank),
                                             static_cast<int>(ids.size()), ids.data(), &config),
        "ncclCommInitRankScalable");
  return comm;
}

void sync_model(ncclComm_t comm, const std::vector<DeviceBuffer>& buffers, bool reduce_parameters,
                bool reduce_buffers, cudaStream_t stream) {
  // One group: NCCL fuses the launches.
  check(CALL(nccl, ncclGroupStart)(), "ncclGroupStart");
  for (const auto& b : buffers) {
    bool reduce = b.is_parameter ? reduce_parameters : reduce_buffers;
    if (reduce)
      check(CALL(nccl, ncclAllReduce)(b.data, b.data, b.count, b.type, ncclAvg, comm, stream),
            "ncclAllReduce");
    else
      check(CALL(nccl, ncclBroadcast)(b.data, b.data, b.count, b.type, 0, comm, stream),
            "ncclBroadcast");
  }
  check(CALL(nccl, ncclGroupEnd)(), "ncclGroupEnd");
  check(CALL(cuda_runtime, cudaStreamSynchronize)(stream), "cudaStreamSynchronize");
}

}  // namespace muster::gpu
