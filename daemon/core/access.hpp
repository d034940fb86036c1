// Who may do what (access.cpp says the rules): the checks every local
// request passes before its handler runs, in order admit (where it came
// from), scope_job (the job in the sender's namespace, namespaces.cpp) and
// authorize (owner, claimed pids, generation); and what a reserve or join
// may lease under slurm-gpus = verified. Everything here only reads the
// jobs: a refused request changes no state.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/job_scope.hpp"
#include "core/job_table.hpp"
#include "core/reply.hpp"
#include "protocol/envelope.hpp"
#include "protocol/message_table.hpp"

namespace muster::daemon {

class Access {
 public:
  // admin_uid: the uid besides root that may send what only root may (the
  // message table's "root" rows): the one the daemon runs as.
  Access(const JobTable& jobs, int64_t admin_uid) : jobs_(jobs), admin_uid_(admin_uid) {}

  // The request's row of the message table, if it may arrive where it did;
  // throws Error otherwise.
  static const proto::MessageTraits& admit(const ReplyTo& to, const proto::Envelope& env);
  // The job a local request names, in the sender's namespace: the
  // request's job field made its key in place (it points into this object
  // until the next request). Throws Error for a name outside the charset
  // or an owner the sender may not name; changes nothing else.
  JobScope scope_job(const ReplyTo& to, const proto::Envelope& env, const proto::MessageTraits& t);
  // Ownership, claimed pids and the generation fence, as the row says:
  // throws Error before any handler runs; changes nothing.
  void authorize(const ReplyTo& to, const proto::Envelope& env,
                 const proto::MessageTraits& t) const;

  // slurm-gpus = verified (server.cpp, slurm/verified_gpus.hpp): the GPUs
  // process `pid` may lease for a job of `owner`, or a throw saying why
  // none. Unset (slurm-gpus = client): a client's device list only narrows.
  using SlurmGpus = std::function<std::vector<int64_t>(int64_t pid, int64_t owner)>;
  void set_slurm_gpus(SlurmGpus f) { slurm_gpus_ = std::move(f); }
  // What a reserve or join of `owner`'s job from `pid` may lease: `asked`
  // (empty = any) within the Slurm job's allocation when slurm-gpus =
  // verified and the node has GPUs; throws no_device when nothing is left.
  std::vector<int64_t> slurm_narrow(int64_t pid, int64_t owner, bool wants_gpu,
                                    std::vector<int64_t> asked) const;

 private:
  // Root's join into another user's job: only from a process registered in
  // one of its slots (or a descendant of one); throws otherwise.
  void check_registered(const JobScope& s, int64_t pid) const;

  const JobTable& jobs_;
  const int64_t admin_uid_;
  // The key of the job the request in hand names (scope_job): its payload
  // points here while the handler reads it.
  std::string scoped_key_;
  SlurmGpus slurm_gpus_;
};

}  // namespace muster::daemon
