// A musterd for machines where none runs: `muster run` forks one that binds
// the socket a system daemon would (so `muster status` sees it) and lives as
// long as it has jobs, its launcher's or those of other launchers that found
// it. Being its own process, it survives even a SIGKILLed launcher, so the
// leases of other jobs are never forgotten.
#pragma once

#include <string>

namespace muster::cli {

// Returns once a daemon answers at endpoint: the one already there, or an
// embedded one started now. Throws muster::Error when neither works.
void ensure_daemon(const std::string& endpoint, int simulate_gpus);

}  // namespace muster::cli
