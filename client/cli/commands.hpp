#pragma once

#include <string>
#include <vector>

namespace muster::cli {

int run_main(const std::vector<std::string>& args);
// `muster run` that appends --local_rank=N (torch.distributed.launch).
int launch_main(const std::vector<std::string>& args);
int status_main(const std::vector<std::string>& args);
int keygen_main(const std::vector<std::string>& args);
// `muster gpu drain|undrain N` (root).
int gpu_main(const std::vector<std::string>& args);

}  // namespace muster::cli
