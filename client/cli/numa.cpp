#include "cli/numa.hpp"

#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "muster/client.hpp"

namespace muster::cli {

namespace {

// Far above any machine's CPU count, low enough that a garbled list cannot
// make the launcher allocate a huge mask.
constexpr int kMaxCpu = 1 << 16;
constexpr size_t kWordBits = sizeof(unsigned long) * 8;

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

bool parse_cpu(const std::string& s, int& out) {
  if (s.empty() || s.size() > 6 || s.find_first_not_of("0123456789") != std::string::npos)
    return false;
  out = std::stoi(s);
  return out < kMaxCpu;
}

// The CPUs this process may run on (a container's or a Slurm job's cgroup,
// taskset): empty when the kernel will not say.
CpuList allowed_cpus() {
  for (int n = 1024; n <= kMaxCpu; n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    size_t size = CPU_ALLOC_SIZE(n);
    if (sched_getaffinity(0, size, set) == 0) {
      CpuList cpus;
      for (int c = 0; c < n; ++c)
        if (CPU_ISSET_S(c, size, set)) cpus.push_back(c);
      CPU_FREE(set);
      return cpus;
    }
    CPU_FREE(set);
    if (errno != EINVAL) break;  // EINVAL: the machine has more CPUs than n
  }
  return {};
}

bool node_exists(int64_t node) {
  return node >= 0 &&
         ::access(("/sys/devices/system/node/node" + std::to_string(node)).c_str(), F_OK) == 0;
}

CpuList intersect(const CpuList& a, const CpuList& b) {
  CpuList out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// What the plan reads about this machine, each /sys file once.
class Machine {
 public:
  Machine() : allowed_(allowed_cpus()) {}
  const CpuList& allowed() const { return allowed_; }

  // The CPUs near a GPU: NVML's affinity of the device, else its NUMA
  // node's CPUs as the kernel lists them; empty when neither is known.
  CpuList near(const DeviceInfo& gpu) const {
    auto cpus = parse_cpulist(gpu.cpu_affinity);
    if (cpus.empty() && gpu.numa_node >= 0)
      cpus = parse_cpulist(
          first_line("/sys/devices/system/node/node" + std::to_string(gpu.numa_node) + "/cpulist"));
    return cpus;
  }

  // The CPUs of the sockets (physical packages) that `near` lies on: the
  // union of all their NUMA nodes' CPUs. Only CPUs this process may use
  // can matter, so those are the ones looked up. Without package ids (no
  // /sys topology, some VMs), the node's CPUs: never wider than known.
  CpuList socket(const CpuList& near) {
    std::set<int> packages;
    for (int c : near)
      if (int p = package(c); p >= 0) packages.insert(p);
    if (packages.empty()) return near;
    CpuList cpus;
    for (int c : allowed_)
      if (packages.count(package(c)) || std::binary_search(near.begin(), near.end(), c))
        cpus.push_back(c);
    return cpus;
  }

 private:
  int package(int cpu) {
    auto [it, fresh] = packages_.try_emplace(cpu, -1);
    if (fresh) {
      auto id = first_line("/sys/devices/system/cpu/cpu" + std::to_string(cpu) +
                           "/topology/physical_package_id");
      int p = -1;
      if (parse_cpu(id, p)) it->second = p;
    }
    return it->second;
  }

  CpuList allowed_;
  std::map<int, int> packages_;
};

// Each rank's CPUs under mode (node or socket), within what this process
// may use; a rank whose set would be empty or is unknown stays unpinned.
std::vector<RankPin> pin_ranks(const std::string& mode, const std::vector<const DeviceInfo*>& gpus,
                               Machine& m) {
  std::vector<RankPin> pins(gpus.size());
  for (size_t r = 0; r < gpus.size(); ++r) {
    auto& pin = pins[r];
    if (!gpus[r]) {
      pin.why = "no GPU";
      continue;
    }
    auto near = m.near(*gpus[r]);
    if (near.empty()) {
      // No GPU index here: ranks alike are said together.
      pin.why = "the GPU's CPUs are unknown";
      continue;
    }
    if (m.allowed().empty()) {
      pin.why = "this launcher's own CPUs are unknown";
      continue;
    }
    auto cpus = intersect(mode == "socket" ? m.socket(near) : near, m.allowed());
    if (cpus.empty()) {
      pin.why = "GPU " + std::to_string(gpus[r]->index) + "'s CPUs " + cpulist_text(near) +
                " are none of the CPUs this launcher may use (" + cpulist_text(m.allowed()) + ")";
      continue;
    }
    pin.cpus = std::move(cpus);
    // socket too prefers the GPU's own node: its memory is the nearest to
    // the GPU (its copies to and from the host), whichever CPU runs the rank.
    if (node_exists(gpus[r]->numa_node)) pin.node = gpus[r]->numa_node;
  }
  return pins;
}

// A CPU set that more ranks would share than it has CPUs ("4 ranks share
// CPUs 0 (1 CPU)"), or "": pinning them there would make them take turns
// on fewer cores than an unpinned job gets.
std::string crowded(const std::vector<RankPin>& pins) {
  std::map<CpuList, size_t> sharing;
  for (const auto& p : pins)
    if (!p.cpus.empty()) ++sharing[p.cpus];
  for (const auto& [cpus, ranks] : sharing)
    if (ranks > cpus.size())
      return std::to_string(ranks) + " ranks share CPUs " + cpulist_text(cpus) + " (" +
             std::to_string(cpus.size()) + (cpus.size() == 1 ? " CPU)" : " CPUs)");
  return "";
}

}  // namespace

CpuList parse_cpulist(const std::string& text) {
  std::set<int> cpus;
  std::istringstream items(text.substr(0, text.find_last_not_of(" \n") + 1));
  for (std::string item; std::getline(items, item, ',');) {
    auto dash = item.find('-');
    int lo = 0, hi = 0;
    if (!parse_cpu(item.substr(0, dash), lo) ||
        !parse_cpu(dash == std::string::npos ? item : item.substr(dash + 1), hi) || hi < lo)
      return {};
    for (int c = lo; c <= hi; ++c) cpus.insert(c);
  }
  return {cpus.begin(), cpus.end()};
}

std::string cpulist_text(const CpuList& cpus) {
  std::string out;
  for (size_t i = 0; i < cpus.size();) {
    size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ",";
    out += std::to_string(cpus[i]);
    if (j > i) out += "-" + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

void check_numa_binding(const std::string& mode) {
  if (mode.empty() || mode == "none" || mode == "node" || mode == "socket") return;
  if (mode == "exclusive" || mode == "core-complex")
    throw std::runtime_error("--numa-binding " + mode +
                             ": torchrun's mode is not in muster; use node or socket");
  throw std::runtime_error("--numa-binding: invalid choice '" + mode +
                           "' (choose from 'none', 'node', 'socket')");
}

NumaPlan plan_numa_binding(const std::string& asked, const std::vector<const DeviceInfo*>& gpus) {
  bool any_gpu = std::any_of(gpus.begin(), gpus.end(), [](auto* g) { return g != nullptr; });
  NumaPlan plan;
  plan.ranks.resize(gpus.size());
  plan.mode = asked.empty() ? (any_gpu ? "node" : "none") : asked;
  if (plan.mode != "none" && !any_gpu) {
    plan.notes.push_back("a job without GPUs has nothing to be near");
    plan.mode = "none";
  }
  if (plan.mode == "none") return plan;
  Machine m;
  // Crowded ranks get the next wider set: node, then socket, then none.
  for (; plan.mode != "none"; plan.mode = plan.mode == "node" ? "socket" : "none") {
    auto pins = pin_ranks(plan.mode, gpus, m);
    auto why = crowded(pins);
    if (why.empty()) {
      plan.ranks = std::move(pins);
      return plan;
    }
    plan.notes.push_back("widened from " + plan.mode + ": " + why);
  }
  return plan;
}

std::string describe(const NumaPlan& plan, uint32_t rank_offset) {
  std::string s = "numa binding " + plan.mode;
  // Ranks with the same binding together, in the order of their first rank.
  std::vector<std::pair<std::string, CpuList>> groups;
  for (size_t r = 0; r < plan.ranks.size() && plan.mode != "none"; ++r) {
    const auto& p = plan.ranks[r];
    std::string what = p.cpus.empty()
                           ? " not pinned (" + p.why + ")"
                           : " → CPUs " + cpulist_text(p.cpus) +
                                 (p.node >= 0 ? " (node " + std::to_string(p.node) + ")" : "");
    auto g = std::find_if(groups.begin(), groups.end(), [&](auto& e) { return e.first == what; });
    if (g == groups.end()) g = groups.insert(groups.end(), {what, {}});
    g->second.push_back(static_cast<int>(rank_offset + r));
  }
  const char* sep = ": ";
  for (const auto& [what, ranks] : groups) {
    s += sep + std::string(ranks.size() > 1 ? "ranks " : "rank ") + cpulist_text(ranks) + what;
    sep = ", ";
  }
  for (const auto& n : plan.notes) s += "; " + n;
  return s;
}

PinMasks pin_masks(const RankPin& pin) {
  PinMasks m;
  if (pin.cpus.empty()) return m;
  m.cpus.resize(static_cast<size_t>(pin.cpus.back()) / kWordBits + 1);
  for (int c : pin.cpus) m.cpus[c / kWordBits] |= 1UL << (c % kWordBits);
  if (pin.node >= 0) {
    auto n = static_cast<size_t>(pin.node);
    m.nodes.resize(n / kWordBits + 1);
    m.nodes[n / kWordBits] |= 1UL << (n % kWordBits);
  }
  return m;
}

namespace {
void say(const char* msg) {
  ssize_t n = ::write(STDERR_FILENO, msg, std::strlen(msg));
  (void)n;
}
}  // namespace

void apply_pin(const PinMasks& m) {
  // Raw system calls: the glibc wrappers are thin, but only the syscall
  // itself is sure to take no lock a thread of the parent held at fork.
  if (!m.cpus.empty() &&
      syscall(SYS_sched_setaffinity, 0, m.cpus.size() * sizeof(unsigned long), m.cpus.data()) != 0)
    say("muster: numa binding: could not pin this worker's CPUs; it runs unpinned\n");
  // Preferred, not bound: MPOL_BIND makes allocation fail (the OOM killer
  // ends the rank) once the node's memory is full, and pinned host buffers,
  // the page cache or a large dataset may well fill one node; preferred
  // takes the near node first and spills over to the others. The kernel
  // counts maxnode one past the mask's bits. A kernel without NUMA
  // (ENOSYS) or a seccomp filter that forbids it (EPERM) leaves the
  // default policy, which is no worse than running unbound.
  if (!m.nodes.empty() &&
      syscall(SYS_set_mempolicy, MPOL_PREFERRED, m.nodes.data(), m.nodes.size() * kWordBits + 1) !=
          0 &&
      errno != ENOSYS && errno != EPERM)
    say("muster: numa binding: could not prefer this worker's NUMA node for memory\n");
}

std::string NumaPlan::applied() const {
  bool pinned =
      std::any_of(ranks.begin(), ranks.end(), [](const RankPin& r) { return !r.cpus.empty(); });
  return pinned ? mode : "none";
}

NumaPlan numa_plan(const std::string& endpoint, const std::string& asked,
                   const std::vector<int>& leased, uint32_t rank_offset) {
  std::vector<DeviceInfo> devices;
  bool any = std::any_of(leased.begin(), leased.end(), [](int d) { return d >= 0; });
  std::string unasked;
  try {
    if (any && asked != "none") devices = Client({endpoint}).status().devices;
  } catch (const Error& e) {
    // Binding never decides whether a job runs: without the GPUs' CPUs
    // the ranks run unpinned, and the line below says why.
    unasked = std::string("the daemon's GPU list could not be read (") + e.what() + ")";
  }
  std::vector<const DeviceInfo*> gpus(leased.size(), nullptr);
  for (size_t r = 0; r < leased.size(); ++r)
    for (const auto& d : devices)
      if (static_cast<int>(d.index) == leased[r]) gpus[r] = &d;
  auto plan = plan_numa_binding(asked, gpus);
  if (!unasked.empty()) plan.notes.push_back(unasked);
  if (!asked.empty() || plan.mode != "none" || !plan.notes.empty())
    std::cerr << "muster: " << describe(plan, rank_offset) << "\n";
  return plan;
}

}  // namespace muster::cli
