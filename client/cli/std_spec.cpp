#include "cli/std_spec.hpp"

#include <stdexcept>

#include "split.hpp"

namespace muster::cli {

namespace {

int one_value(const std::string& spec, const std::string& v) {
  if (v.size() != 1 || v[0] < '0' || v[0] > '3')
    throw std::runtime_error("'" + spec + "' is not 0, 1, 2, 3 or LOCAL_RANK:N,... (N 0..3)");
  return v[0] - '0';
}

}  // namespace

int std_streams(const std::string& spec, uint32_t local_rank) {
  if (spec.empty()) return 0;
  if (spec.find(':') == std::string::npos) return one_value(spec, spec);
  int found = 0;
  for (const auto& item : split(spec)) {
    auto colon = item.find(':');
    std::string rank = item.substr(0, colon);
    if (colon == std::string::npos || rank.empty() || rank.size() > 5 ||
        rank.find_first_not_of("0123456789") != std::string::npos)
      throw std::runtime_error("'" + spec + "' is not 0, 1, 2, 3 or LOCAL_RANK:N,... (N 0..3)");
    int v = one_value(spec, item.substr(colon + 1));
    if (std::stoul(rank) == local_rank) found = v;
  }
  return found;
}

StreamRoutes stream_routes(const std::string& redirects, const std::string& tee,
                           uint32_t local_rank, const std::string& rank_dir) {
  int redirected = std_streams(redirects, local_rank);
  int teed = std_streams(tee, local_rank);
  StreamRoutes r;
  if ((redirected | teed) & kStdout) r.out_file = rank_dir + "/stdout.log";
  if ((redirected | teed) & kStderr) r.err_file = rank_dir + "/stderr.log";
  r.out_console = !(redirected & kStdout) || (teed & kStdout);
  r.err_console = !(redirected & kStderr) || (teed & kStderr);
  return r;
}

}  // namespace muster::cli
