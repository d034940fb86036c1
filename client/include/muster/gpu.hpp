// GPU helpers, built when muster finds CUDA and NCCL: select the leased GPU,
// make an NCCL communicator from a brokered unique id, and the seed's
// sync_model over device buffers.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>
#include <vector>

#include "muster/client.hpp"

namespace muster::gpu {

// cudaSetDevice to the rank's leased GPU; throws when the rank has none.
int select_device(const RankInfo& info);

// ncclCommInitRank over the job's world with the id brokered under name.
ncclComm_t init_communicator(Client& client, const std::string& name = "world");

// ncclCommInitRankScalable with n_ids brokered ids (NCCL >= 2.23).
ncclComm_t init_communicator_scalable(Client& client, uint32_t n_ids,
                                      const std::string& name = "world");

struct DeviceBuffer {
  void* data = nullptr;
  size_t count = 0;  // elements
  ncclDataType_t type = ncclFloat32;
  bool is_parameter = true;
};

// Every rank ends with rank 0's values (ncclBroadcast); with a reduce flag
// set, those buffers are averaged instead (ncclAllReduce with ncclAvg).
void sync_model(ncclComm_t comm, const std::vector<DeviceBuffer>& buffers,
                bool reduce_parameters = false, bool reduce_buffers = false,
                cudaStream_t stream = nullptr);

}  // namespace muster::gpu
