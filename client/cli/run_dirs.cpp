#include "cli/run_dirs.hpp"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

namespace muster::cli {

namespace fs = std::filesystem;

namespace {

// mkdtemp of prefix + "XXXXXX": torch's tempfile.mkdtemp(prefix=...).
std::string make_unique_dir(const std::string& prefix) {
  std::vector<char> path(prefix.begin(), prefix.end());
  for (char c : std::string("XXXXXX")) path.push_back(c);
  path.push_back('\0');
  if (!mkdtemp(path.data()))
    throw std::runtime_error("cannot create a directory " + prefix + "XXXXXX: " + strerror(errno));
  return path.data();
}

}  // namespace

RunDirs::RunDirs(const std::string& log_dir, const std::string& run_id, bool keep_temporary) {
  keep_ = !log_dir.empty() || keep_temporary;
  if (!log_dir.empty()) {
    std::error_code ec;
    fs::create_directories(log_dir, ec);
    if (ec) throw std::runtime_error("--log-dir " + log_dir + ": " + ec.message());
    base_ = make_unique_dir(log_dir + "/" + run_id + "_");
  } else {
    const char* tmp = std::getenv("TMPDIR");
    base_ = make_unique_dir(std::string(tmp && *tmp ? tmp : "/tmp") + "/muster_" + run_id + "_");
  }
}

RunDirs::~RunDirs() {
  if (keep_) return;
  std::error_code ec;
  fs::remove_all(base_, ec);  // nothing to do about a failure at exit
}

std::string RunDirs::rank_dir(uint32_t attempt, uint32_t local_rank) const {
  std::string dir =
      base_ + "/attempt_" + std::to_string(attempt) + "/" + std::to_string(local_rank);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error("cannot create " + dir + ": " + ec.message());
  return dir;
}

std::string RunDirs::error_file(uint32_t attempt, uint32_t local_rank) const {
  return rank_dir(attempt, local_rank) + "/error.json";
}

}  // namespace muster::cli
