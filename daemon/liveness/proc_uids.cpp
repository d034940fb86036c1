#include "liveness/proc_uids.hpp"

#include <cstdio>
#include <cstring>

namespace muster::daemon {

std::optional<int64_t> sole_uid(int64_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%lld/status", static_cast<long long>(pid));
  FILE* f = std::fopen(path, "re");
  if (!f) return std::nullopt;
  char line[256];
  std::optional<int64_t> uid;
  while (std::fgets(line, sizeof line, f)) {
    if (std::strncmp(line, "Uid:", 4) != 0) continue;
    long long ids[4] = {-1, -1, -1, -1};
    if (std::sscanf(line + 4, "%lld %lld %lld %lld", &ids[0], &ids[1], &ids[2], &ids[3]) == 4 &&
        ids[0] >= 0 && ids[1] == ids[0] && ids[2] == ids[0] && ids[3] == ids[0])
      uid = ids[0];
    break;
  }
  std::fclose(f);
  return uid;
}

}  // namespace muster::daemon
