// Asks libmuster for an NCCL id the way a rank does, after loading the
// library named by argv[1] (if any) the way torch loads its NCCL: as a
// dependency of something else, RTLD_LOCAL, invisible to dlsym's global
// scope. Prints the id's first bytes as text ("id: ...") or the error
// ("error: ..."), for tests/test_gpu_libs.cpp.
#include <dlfcn.h>

#include <cstdio>
#include <string>

#include "muster/broadcast.hpp"
#include "muster/client.hpp"

int main(int argc, char** argv) {
  if (argc > 1 && *argv[1] && !dlopen(argv[1], RTLD_NOW | RTLD_LOCAL)) {
    std::printf("error: cannot preload %s: %s\n", argv[1], dlerror());
    return 1;
  }
  try {
    muster::Client c;
    c.join({"nccl-probe", 1, false, 0});
    std::string id = muster::nccl_unique_id(c, "world");
    std::printf("id: %s\n", std::string(id.c_str()).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::printf("error: %s\n", e.what());
    return 3;
  }
}
