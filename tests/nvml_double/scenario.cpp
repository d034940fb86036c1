#include "nvml_double/scenario.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace nvml_double {

namespace {

// key=value words; a value may be "quoted" to hold spaces.
std::map<std::string, std::string> fields(const std::string& line, std::string& kind) {
  std::map<std::string, std::string> out;
  size_t i = 0;
  auto skip = [&] {
    while (i < line.size() && line[i] == ' ') ++i;
  };
  skip();
  while (i < line.size() && line[i] != ' ') kind += line[i++];
  for (skip(); i < line.size(); skip()) {
    std::string key, value;
    while (i < line.size() && line[i] != '=' && line[i] != ' ') key += line[i++];
    if (i < line.size() && line[i] == '=') ++i;
    if (i < line.size() && line[i] == '"') {
      for (++i; i < line.size() && line[i] != '"'; ++i) value += line[i];
      ++i;
    } else {
      while (i < line.size() && line[i] != ' ') value += line[i++];
    }
    out[key] = value;
  }
  return out;
}

std::vector<unsigned> cpu_set(const std::string& list) {
  std::vector<unsigned> out;
  std::stringstream ss(list);
  for (std::string part; std::getline(ss, part, ',');) {
    if (part.empty()) continue;
    auto dash = part.find('-');
    unsigned a = std::stoul(part.substr(0, dash));
    unsigned b = dash == std::string::npos ? a : std::stoul(part.substr(dash + 1));
    for (unsigned c = a; c <= b; ++c) out.push_back(c);
  }
  return out;
}

Gpu gpu(std::map<std::string, std::string>& f) {
  Gpu g;
  auto num = [&](const char* k, auto& v) {
    if (f.count(k)) v = static_cast<std::decay_t<decltype(v)>>(std::stoull(f[k]));
  };
  g.uuid = f["uuid"];
  g.bus_id = f["bus"];
  if (f.count("name")) g.name = f["name"];
  if (f.count("mode")) g.mode = f["mode"];
  if (f.count("numa")) g.numa = std::stoi(f["numa"]);
  g.cpus = cpu_set(f["cpus"]);
  num("memory", g.memory);
  num("ecc", g.ecc_volatile);
  num("ecc_aggregate", g.ecc_aggregate);
  num("mig", g.mig);
  num("retired_pending", g.retired_pending);
  num("remap_failed", g.remap_failed);
  num("lost", g.lost);
  std::stringstream ss(f["procs"]);
  for (std::string p; std::getline(ss, p, ',');) {
    if (p.empty()) continue;
    auto colon = p.find(':');
    Proc pr;
    pr.pid = static_cast<unsigned>(std::stoul(p.substr(0, colon)));
    pr.used = colon == std::string::npos ? (1ULL << 30) : std::stoull(p.substr(colon + 1));
    g.procs.push_back(pr);
  }
  return g;
}

}  // namespace

Scenario parse(const std::string& text) {
  Scenario s;
  std::vector<std::pair<std::string, unsigned long long>> xids;  // (gpu, code)
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::string kind;
    auto f = fields(line, kind);
    try {
      if (kind == "gpu" && s.gpus.size() < kMaxGpus) s.gpus.push_back(gpu(f));
      if (kind == "xid") xids.emplace_back(f["gpu"], std::stoull(f["code"]));
    } catch (const std::exception&) {
      // A malformed line is skipped, as a half-written one may be.
    }
  }
  // NVML's order: PCI bus id.
  std::stable_sort(s.gpus.begin(), s.gpus.end(),
                   [](const Gpu& a, const Gpu& b) { return a.bus_id < b.bus_id; });
  for (const auto& [who, code] : xids)
    for (unsigned i = 0; i < s.gpus.size(); ++i)
      if (s.gpus[i].uuid == who || s.gpus[i].bus_id == who) s.xids.push_back({i, code});
  return s;
}

Scenario load() {
  const char* path = std::getenv("MUSTER_NVML_SCENARIO");
  if (!path) return {};
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return parse(ss.str());
}

}  // namespace nvml_double
