// Where a job's per-rank files go, laid out as torch 1.13's launcher lays
// them out: <base>/attempt_<n>/<local_rank>/{error.json,stdout.log,stderr.log},
// base = <log_dir>/<run_id>_<random> (--log-dir), else a private temporary
// directory removed when the run ends (kept when keep_temporary: the
// workers' logs are in it).
#pragma once

#include <cstdint>
#include <string>

namespace muster::cli {

class RunDirs {
 public:
  // Creates base. Throws std::runtime_error when it cannot.
  RunDirs(const std::string& log_dir, const std::string& run_id, bool keep_temporary);
  ~RunDirs();
  RunDirs(const RunDirs&) = delete;
  RunDirs& operator=(const RunDirs&) = delete;

  const std::string& base() const { return base_; }
  bool kept() const { return keep_; }
  // <base>/attempt_<n>/<local_rank>, created.
  std::string rank_dir(uint32_t attempt, uint32_t local_rank) const;
  // TORCHELASTIC_ERROR_FILE of a rank in an attempt (its directory created).
  std::string error_file(uint32_t attempt, uint32_t local_rank) const;

 private:
  std::string base_;
  bool keep_ = false;
};

}  // namespace muster::cli
