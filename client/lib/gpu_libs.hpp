// The NCCL and CUDA runtime that libmuster calls, found at run time: nothing
// of either is linked, so libmuster loads on a CPU-only machine and on a
// driver-only GPU node, and in a process that brought its own NCCL (torch)
// it calls that copy instead of loading a second one. Not installed.
#pragma once

#include <string>

namespace muster::detail {

struct LibSlot;

// One loaded library: dlsym() resolves its entry points.
class GpuLib {
 public:
  // The entry point `name`, or null where this library lacks it.
  void* sym(const char* name) const;
  template <class F>
  F fn(const char* name) const {
    return reinterpret_cast<F>(sym(name));
  }
  // Where it came from: a path, "the process's own" or "already loaded".
  const std::string& where() const { return where_; }

 private:
  friend struct LibSlot;  // gpu_libs.cpp: finds and loads one
  // RTLD_DEFAULT (the process's global scope) is a null handle, so whether
  // one was found is kept apart.
  bool found_ = false;
  void* handle_ = nullptr;
  std::string where_;
};

// The process's NCCL, in this order: $MUSTER_NCCL_LIBRARY (a path; nothing
// else is tried when it is set), the program's own (linked, or loaded
// globally), a libnccl.so.2 already loaded (torch's, loaded as one of its
// dependencies), libnccl.so.2 on the loader's path, the build's toolkit
// directory. Throws Error(kUnavailable) with what was tried when none has
// ncclGetUniqueId.
const GpuLib& nccl();

// The process's CUDA runtime, in the same order ($MUSTER_CUDA_RUNTIME_LIBRARY,
// the program's own, a libcudart.so.N already loaded, then the build's
// soname). The program's own comes first because the current device is
// per runtime: cudaSetDevice in a second copy would not select the
// program's device. Throws Error(kUnavailable) when none is found.
const GpuLib& cuda_runtime();

// "found (WHERE), version 2.28.3" or "not found (...)" for `muster --version`.
std::string nccl_summary();

}  // namespace muster::detail
