#include "slurm/allocation.hpp"

#include <sstream>

namespace muster::slurm {

namespace {
bool number(const std::string& s, int64_t max, int64_t& out) {
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::stoll(s);
  return out <= max;
}
}  // namespace

std::optional<std::vector<int64_t>> parse_gpu_list(const std::string& list) {
  std::vector<int64_t> gpus;
  if (list.empty()) return gpus;
  std::istringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    int64_t g = 0;
    if (!number(item, 4095, g)) return std::nullopt;
    gpus.push_back(g);
  }
  return gpus;
}

std::string allocation_text(const Allocation& a) {
  std::string gpus;
  for (auto g : a.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
  return "uid=" + std::to_string(a.uid) + "\ngpus=" + gpus + "\n";
}

std::optional<Allocation> parse_allocation(const std::string& text) {
  std::istringstream in(text);
  std::string uid_line, gpus_line, rest;
  if (!std::getline(in, uid_line) || !std::getline(in, gpus_line) || std::getline(in, rest))
    return std::nullopt;
  Allocation a;
  if (uid_line.rfind("uid=", 0) != 0 || !number(uid_line.substr(4), 0xffffffffLL, a.uid) ||
      gpus_line.rfind("gpus=", 0) != 0)
    return std::nullopt;
  auto gpus = parse_gpu_list(gpus_line.substr(5));
  if (!gpus) return std::nullopt;
  a.gpus = *gpus;
  return a;
}

}  // namespace muster::slurm
