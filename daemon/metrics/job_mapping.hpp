// dcgm-exporter's HPC job mapping (--hpc-job-mapping-dir, or
// DCGM_HPC_JOB_MAPPING_DIR): a directory with one file per GPU, named by
// its index (NVML's, which musterd uses), holding the job id(s) that use
// it, one a line. dcgm-exporter then labels that GPU's metrics hpc_job.
// musterd keeps the file of each GPU it hands out: the job id while a rank
// holds a lease on it, no file while it is free. Each file is replaced
// atomically (a temporary file renamed over it); a write that fails is
// logged and tried again at the next change, never fatal. The directory
// must be the daemon's own (dirs/runtime_dir.hpp open_own_dir): opened
// once without following a link, owned by its uid and writable by no one
// else, and every file is made relative to that descriptor.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace muster::daemon::metrics {

class JobMapping {
 public:
  // Makes dir when it is missing (0755: dcgm-exporter, another user, reads
  // it), then opens and checks it; throws Error(kPermissionDenied) with a
  // sentence when it is a link, another user's, or writable by others.
  explicit JobMapping(std::string dir);
  ~JobMapping();
  JobMapping(const JobMapping&) = delete;
  JobMapping& operator=(const JobMapping&) = delete;
  // The holder of GPU `index` now ("" = free): its file written or removed
  // when that differs from what was last written. The first call for an
  // index always writes, so files left by an earlier daemon are put right.
  void set(int64_t index, const std::string& job);
  const std::string& dir() const { return dir_; }

 private:
  bool write(int64_t index, const std::string& job, std::string* why);
  std::string dir_;
  int dir_fd_ = -1;
  std::map<int64_t, std::string> written_;  // what each file holds now
};

}  // namespace muster::daemon::metrics
