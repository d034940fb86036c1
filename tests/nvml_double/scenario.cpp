#include "nvml_double/scenario.hpp"

#include <algorithm>
#include <cstdio>
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
  num("recovery", g.recovery);
  if (f.count("events")) g.events = std::stoull(f["events"], nullptr, 0);
  g.pcie_switch = f["switch"];
  g.bridge = f["bridge"];
  if (f.count("level")) g.level = std::stoi(f["level"]);
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

// A gpu line's uuid, or its bus id however spelled ("0000:2a:00.0" names
// "00000000:2A:00.0"): the GPU's index, or -1.
int find_gpu(const Scenario& s, const std::string& who) {
  auto pci = [](const std::string& id) {
    unsigned v[4] = {};
    int got = std::sscanf(id.c_str(), "%x:%x:%x.%x", &v[0], &v[1], &v[2], &v[3]);
    return got == 4 ? std::to_string(v[0]) + "/" + std::to_string(v[1]) + "/" +
                          std::to_string(v[2]) + "/" + std::to_string(v[3])
                    : std::string();
  };
  for (size_t i = 0; i < s.gpus.size(); ++i)
    if (s.gpus[i].uuid == who || (!pci(who).empty() && pci(who) == pci(s.gpus[i].bus_id)))
      return static_cast<int>(i);
  return -1;
}

// An nvlink or nvswitch line, once the GPUs are in bus order: link slots
// taken on each end, up to kMaxLinks.
void add_links(Scenario& s, const std::string& kind, std::map<std::string, std::string>& f) {
  auto take = [](Gpu& g, Link l, unsigned n) {
    for (unsigned k = 0; k < n && g.links.size() < kMaxLinks; ++k) g.links.push_back(l);
  };
  if (kind == "nvswitch") {
    int g = find_gpu(s, f["gpu"]);
    if (g >= 0) take(s.gpus[g], {f["bus"], true, true}, std::stoul(f["links"]));
    return;
  }
  int a = find_gpu(s, f["a"]), b = find_gpu(s, f["b"]);
  if (a < 0 || b < 0 || a == b) return;
  bool active = !f.count("active") || f["active"] != "0";
  // The far end as this line spells it when it gives a bus id.
  auto spelled = [&](const std::string& who, int g) {
    return who == s.gpus[g].uuid ? s.gpus[g].bus_id : who;
  };
  unsigned n = static_cast<unsigned>(std::stoul(f["count"]));
  take(s.gpus[a], {spelled(f["b"], b), false, active}, n);
  take(s.gpus[b], {spelled(f["a"], a), false, active}, n);
}

}  // namespace

bool Scenario::refuses(const char* fn) const {
  return std::find(unsupported.begin(), unsupported.end(), fn) != unsupported.end();
}

Scenario parse(const std::string& text) {
  Scenario s;
  std::vector<std::pair<std::string, unsigned long long>> xids;  // (gpu, code)
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> links;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::string kind;
    auto f = fields(line, kind);
    try {
      if (kind == "gpu" && s.gpus.size() < kMaxGpus) s.gpus.push_back(gpu(f));
      if (kind == "xid") xids.emplace_back(f["gpu"], std::stoull(f["code"]));
      if (kind == "nvlink" || kind == "nvswitch") links.emplace_back(kind, f);
      std::stringstream fns(f["fn"]);
      for (std::string fn; kind == "unsupported" && std::getline(fns, fn, ',');)
        s.unsupported.push_back(fn);
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
  for (auto& [kind, f] : links) {
    try {
      add_links(s, kind, f);
    } catch (const std::exception&) {
      // As above: a malformed count is skipped.
    }
  }
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
