// torchrun's -r/--redirects and -t/--tee values (torch's Std.from_str):
// 0 none, 1 stdout, 2 stderr, 3 both, for every local rank; or
// "LOCAL_RANK:N,..." per rank, a rank not named getting 0.
#pragma once

#include <cstdint>
#include <string>

namespace muster::cli {

constexpr int kStdout = 1;
constexpr int kStderr = 2;

// The streams spec names for local_rank (kStdout | kStderr bits). Throws
// std::runtime_error on a malformed spec.
int std_streams(const std::string& spec, uint32_t local_rank);

// Where one worker's streams go: to a file in its log directory, to the
// console, or both (tee).
struct StreamRoutes {
  std::string out_file;  // "" = none
  std::string err_file;
  bool out_console = true;
  bool err_console = true;
};

// From --redirects and --tee: a stream goes to rank_dir/{stdout,stderr}.log
// when either names it, and to the console unless redirected without tee.
StreamRoutes stream_routes(const std::string& redirects, const std::string& tee,
                           uint32_t local_rank, const std::string& rank_dir);

}  // namespace muster::cli
