// A stand-in for libnccl.so.2 (its soname too): ncclGetUniqueId writes a
// marker any test can recognise, so a test sees WHICH NCCL libmuster called
// — the one a process had already loaded (as torch loads its own, as a
// dependency, RTLD_LOCAL) rather than a second copy from the system.
// Declares NCCL's types as nccl.h does: ncclResult_t is an int-sized enum,
// ncclUniqueId 128 bytes.
#include <cstring>

extern "C" {

struct ncclUniqueId {
  char internal[128];
};

__attribute__((visibility("default"))) int ncclGetUniqueId(ncclUniqueId* id) {
  std::memset(id->internal, 0, sizeof id->internal);
  std::strcpy(id->internal, "muster-fake-nccl-id");
  return 0;
}

__attribute__((visibility("default"))) const char* ncclGetErrorString(int) {
  return "fake NCCL error";
}

// NCCL_VERSION_CODE of a 2.99.1 that no real NCCL has.
__attribute__((visibility("default"))) int ncclGetVersion(int* version) {
  *version = 29901;
  return 0;
}
}
