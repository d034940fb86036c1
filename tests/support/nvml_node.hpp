// A node seen through the NVML double (tests/nvml_double/): a scenario file
// in a temporary directory, and the environment that makes a private
// musterd load the double and read it. The file can be rewritten or
// appended to while the daemon runs: the double reads it on every call.
#pragma once

#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

#include "support/process.hpp"

namespace muster::test {

class NvmlNode {
 public:
  explicit NvmlNode(const std::string& scenario) : path_(dir_.path() + "/scenario") {
    set(scenario);
  }
  // Replaces the scenario in one rename, so the double never reads half.
  void set(const std::string& scenario) {
    text_ = scenario;
    spit(path_ + ".tmp", text_);
    std::rename((path_ + ".tmp").c_str(), path_.c_str());
  }
  void append(const std::string& line) { set(text_ + line + "\n"); }
  const std::string& text() const { return text_; }
  // MUSTER_TEST_SYSROOT: the node's own (empty unless a test fills it)
  // /sys, /proc/driver/nvidia and /dev, never the machine's, whose PCI
  // devices might share the scenario's bus ids.
  std::map<std::string, std::string> env() const {
    return {{"MUSTER_NVML_LIBRARY", program("MUSTER_TEST_NVML_DOUBLE")},
            {"MUSTER_NVML_SCENARIO", path_},
            {"MUSTER_TEST_SYSROOT", root()}};
  }
  std::string root() const { return dir_.path() + "/root"; }

 private:
  TempDir dir_;
  std::string path_;
  std::string text_;
};

// GPU i of the two-socket, 8-GPU node below: its UUID and PCI bus id, in
// NVML (bus) order.
inline std::string node_uuid(int i) {
  return "GPU-6b1e2c3d-0000-4000-8000-00000000000" + std::to_string(i);
}
inline std::string node_bus(int i) {
  static const char* bus[] = {"18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"};
  return std::string("00000000:") + bus[i] + ":00.0";
}

// An 8-GPU, two-socket node: GPUs 0-3 on NUMA node 0 (CPUs 0-23,48-71),
// 4-7 on node 1 (CPUs 24-47,72-95). Lines in a non-bus order, as CUDA's
// fastest-first order might list them; `extra[i]` is appended to GPU i's
// line (ecc=2, lost=1, procs=…).
inline std::string eight_gpu_node(std::map<int, std::string> extra = {}) {
  std::string s = "# 8x H100 SXM, two sockets\n";
  for (int i : {4, 0, 5, 1, 6, 2, 7, 3}) {
    s += "gpu uuid=" + node_uuid(i) + " bus=" + node_bus(i) +
         " name=\"NVIDIA H100 80GB HBM3\" memory=85520809984 numa=" + (i < 4 ? "0" : "1") +
         " cpus=" + (i < 4 ? "0-23,48-71" : "24-47,72-95") + " " + extra[i] + "\n";
  }
  return s;
}

// mkdir -p (0755) for a fake driver tree; what exists already stays.
inline void mkdirs(const std::string& path) {
  for (size_t at = path.find('/', 1); at != std::string::npos; at = path.find('/', at + 1))
    ::mkdir(path.substr(0, at).c_str(), 0755);
  ::mkdir(path.c_str(), 0755);
}

// A process that is no descendant of the test (a foreign GPU user for a
// scenario's procs=): sh starts sleep in the background and exits, so
// sleep is reparented. The caller kills it.
inline pid_t orphan_sleeper() {
  Process sh({"/bin/sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"});
  auto line = sh.read_line(std::chrono::seconds(10));
  sh.wait(std::chrono::seconds(10));
  if (!line) throw std::runtime_error("no sleeper started");
  return static_cast<pid_t>(std::stol(*line));
}

}  // namespace muster::test
