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
// Peering of an embedded daemon, for multi-node jobs launched without a
// node daemon (like torchrun, which needs none): CURVE keys or plain TCP as
// muster run was told, and the coordinator's port when this node should
// host it (its address is ours and nobody listens there yet).
struct EmbeddedPeering {
  bool plain = false;
  std::string key_file;
  std::string authorized_keys;
  std::string listen_host;  // empty: no listener
  int listen_port = 0;
};

// Whether a daemon answers at endpoint now (one ping). Throws muster::Error
// (permission denied) when the endpoint is another user's.
bool daemon_answers(const std::string& endpoint);

void ensure_daemon(const std::string& endpoint, int simulate_gpus,
                   const EmbeddedPeering& peering = {});

// muster run (of `job`) will start no more workers: the embedded daemon
// this process started last (if any, and still running) stops once it has
// no job left, instead of lingering for a restart. Not when it serves
// another launcher's job: it then lingers after the last, as before, for
// that launcher's restarts.
void release_embedded_daemon(const std::string& endpoint, const std::string& job);

// For `--coordinator HOST:PORT`: HOST's numeric address when it is an
// address of this machine and nothing accepts connections on PORT yet (so
// this node's embedded daemon should be the coordinator); else "".
std::string coordinator_address_to_host(const std::string& host, int port);

}  // namespace muster::cli
