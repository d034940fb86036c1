#include "gpu_libs.hpp"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include "muster/error.hpp"
#include "muster_config.h"

namespace muster::detail {

namespace {

struct Candidate {
  std::string name;  // for dlopen, or empty: the process's global scope
  int flags;
  std::string where;
};

// Tries each candidate for `probe`; the first that has it wins.
bool find(const std::vector<Candidate>& order, const char* probe, void*& handle, std::string& where,
          std::string& tried) {
  for (const auto& c : order) {
    void* h = c.name.empty() ? RTLD_DEFAULT : dlopen(c.name.c_str(), c.flags);
    if (!h && !c.name.empty()) {
      if (!(c.flags & RTLD_NOLOAD)) {
        const char* e = dlerror();
        tried += "; " + c.where + (e ? std::string(": ") + e : "");
      }
      continue;
    }
    if (dlsym(h, probe)) {
      handle = h;
      where = c.where;
      return true;
    }
    tried += "; " + c.where + ": no " + probe;
    if (!c.name.empty()) dlclose(h);
  }
  return false;
}

std::vector<Candidate> order_for(const char* env_var, const std::vector<std::string>& sonames) {
  if (const char* env = std::getenv(env_var); env && *env)
    return {{env, RTLD_NOW | RTLD_LOCAL, std::string(env_var) + "=" + env}};
  std::vector<Candidate> order{{"", 0, "the process's own"}};
  for (const auto& s : sonames) order.push_back({s, RTLD_NOW | RTLD_NOLOAD, "already loaded " + s});
  for (const auto& s : sonames) order.push_back({s, RTLD_NOW | RTLD_LOCAL, s});
#ifdef MUSTER_GPU_TOOLKIT_LIB
  for (const auto& s : sonames)
    order.push_back(
        {MUSTER_GPU_TOOLKIT_LIB "/" + s, RTLD_NOW | RTLD_LOCAL, MUSTER_GPU_TOOLKIT_LIB "/" + s});
#endif
  return order;
}

}  // namespace

// Loaded once per process and never unloaded (NCCL's threads and CUDA's
// contexts outlive any one call); a failed search is tried again next time,
// so a library installed later is found without a restart.
struct LibSlot {
  std::mutex m;
  bool found = false;
  GpuLib lib;

  // The first of order_for(env_var, sonames) that has `probe`; else
  // Error(kUnavailable): "<what> was not found (tried ...): <install> or
  // set <env_var> to its path".
  const GpuLib& get(const char* env_var, const std::vector<std::string>& sonames, const char* probe,
                    const char* what, const char* install) {
    std::lock_guard lock(m);
    if (found) return lib;
    std::string tried;
    if (!find(order_for(env_var, sonames), probe, lib.handle_, lib.where_, tried))
      throw Error(ErrorCode::kUnavailable, std::string(what) + " was not found (tried" +
                                               tried.substr(1) + "): " + install + " or set " +
                                               env_var + " to its path");
    lib.found_ = found = true;
    return lib;
  }
};

void* GpuLib::sym(const char* name) const {
  return found_ ? dlsym(handle_, name) : nullptr;
}

const GpuLib& nccl() {
  static LibSlot slot;
  return slot.get("MUSTER_NCCL_LIBRARY", {"libnccl.so.2"}, "ncclGetUniqueId", "NCCL",
                  "install NCCL (libnccl.so.2)");
}

const GpuLib& cuda_runtime() {
  static LibSlot slot;
  // Newest first: a process that loaded one has only that one.
  return slot.get("MUSTER_CUDA_RUNTIME_LIBRARY",
                  {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"}, "cudaSetDevice",
                  "the CUDA runtime", "install it (libcudart.so)");
}

std::string nccl_summary() {
  try {
    const GpuLib& lib = nccl();
    std::string out = "found (" + lib.where() + ")";
    int v = 0;
    if (auto get = lib.fn<int (*)(int*)>("ncclGetVersion"); get && get(&v) == 0) {
      // NCCL_VERSION_CODE: major*10000 + minor*100 + patch since 2.9.
      out += ", version " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
             std::to_string(v % 100);
    }
    return out;
  } catch (const Error& e) {
    return e.what();
  }
}

}  // namespace muster::detail
