// Who may do what: the one check every request passes before its handler
// runs (State::handle calls admit(), scope_job() and authorize()). The rules are the
// message table's (common/protocol/message_table.hpp), applied here:
//
//  - Scope: a request may arrive only on the socket its row names; peer
//    daemons' messages are refused on the local socket, a reply type is
//    never a request, a type without a row is refused.
//  - A job belongs to the uid that created it (a row that creates_job);
//    a request whose row says the job's owner sends it is refused from any
//    other uid. Root (uid 0) acts for any owner.
//  - A pid a request claims (the row's pids) must be a process all of whose
//    uids (real, effective, saved, filesystem: /proc/PID/status) are the
//    caller's, unless the caller is root: nobody can hand a lease to, or end
//    the lease of, a process of another user or one running with another
//    user's privileges.
//  - A job the caller may not see is refused exactly as a job that does not
//    exist (same code, same sentence).
//  - Each sender's job names are its own namespace (namespaces.cpp runs
//    first and makes the name the job's key): root reaches another user's
//    job only by naming its owner, and joins it only from a process that
//    job's launcher registered.
//  - A row whose sender is root (draining a GPU) is refused with
//    permission_denied from every uid but root and the daemon's own.
//  - Generation fence: a fenced request that carries a generation must
//    carry the job's current one (stale_generation).
//
// The sender's uid comes from the server (ReplyTo::peer_uid, SO_PEERCRED);
// -1 marks an in-process caller, for which the owner and pid rules have
// nothing to check against (see ReplyTo). Everything here only reads: a
// refused request changes no state.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>

#include "core/access.hpp"
#include "liveness/proc_uids.hpp"
#include "protocol/limits.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

// What a request names: read straight from the payload map, without
// copying store values. Full validation stays with each message's unpack();
// the fields read here use the same types and ranges, so a malformed request
// is refused with the same kind of error either way.
struct Claims {
  std::string job;
  std::vector<int64_t> pids;
  std::optional<uint64_t> generation;
};

Claims claims_of(const proto::Envelope& env, const proto::MessageTraits& t) {
  Claims c;
  codec::MapReader r(env.payload, t.name);
  c.job = r.str("job", limits::kMaxJobIdBytes);
  switch (t.pids) {
    case proto::ClaimedPids::kNone:
      break;
    case proto::ClaimedPids::kPid:
      c.pids.push_back(r.i64("pid", 1, limits::kMaxPid));
      break;
    case proto::ClaimedPids::kLauncherPid:
      c.pids.push_back(r.i64("launcher_pid", 1, limits::kMaxPid));
      break;
    case proto::ClaimedPids::kPidList:
      c.pids = r.int_list("pids", limits::kMaxLocalWorldSize, 1, limits::kMaxPid);
      break;
  }
  if (t.fenced && r.has("generation")) c.generation = r.u64("generation", 0, UINT64_MAX);
  return c;
}

}  // namespace

const proto::MessageTraits& Access::admit(const ReplyTo& to, const proto::Envelope& env) {
  const proto::MessageTraits* t = proto::message_traits(env.type);
  if (!t)  // decode_envelope refuses these already; the table decides either way
    throw Error(ErrorCode::kUnknownType, "unknown message type " + std::to_string(env.type));
  if (t->sender == proto::Sender::kNone)
    throw Error(ErrorCode::kUnknownType,
                std::string("message type '") + t->name + "' is a reply, not a request");
  if (to.from_peer && !(t->scope & proto::kScopePeer))
    throw Error(ErrorCode::kUnknownType, std::string("message type '") + t->name +
                                             "' is not something a peer daemon may ask");
  if (!to.from_peer && !(t->scope & proto::kScopeLocal))
    throw Error(ErrorCode::kPermissionDenied,
                std::string("'") + t->name +
                    "' is for peer daemons on the peer port, not for the local socket");
  return *t;
}

void Access::authorize(const ReplyTo& to, const proto::Envelope& env,
                       const proto::MessageTraits& t) const {
  if (t.sender == proto::Sender::kAdmin && to.peer_uid >= 0 && to.peer_uid != 0 &&
      to.peer_uid != admin_uid_)
    throw Error(
        ErrorCode::kPermissionDenied,
        std::string("only root") +
            (admin_uid_ > 0 ? " or uid " + std::to_string(admin_uid_) + " (musterd's)" : "") +
            " may send '" + t.name + "'; uid " + std::to_string(to.peer_uid) +
            " may not, and nothing was changed");
  if (t.sender != proto::Sender::kJobOwner) return;
  const Claims c = claims_of(env, t);
  // Root and in-process callers (-1) may act on any job and claim any pid.
  bool checked = to.peer_uid > 0;
  const Job* found = jobs_.find(c.job);
  if (!found) {
    // The handler answers unknown_job (or validates the id); only a request
    // that creates the job goes on to have its pids checked.
    if (!t.creates_job) return;
  } else {
    const Job& job = *found;
    if (checked && job.owner_uid >= 0 && job.owner_uid != to.peer_uid) {
      // Said exactly as for a job that does not exist (JobTable::get): a job
      // the sender may not see in status is not revealed by a refusal
      // either, neither its owner nor that it exists. A request that would
      // create the job cannot pretend it is absent; it learns only that the
      // name is taken.
      if (t.creates_job)
        throw Error(ErrorCode::kConflict,
                    "job '" + c.job + "' already runs on this daemon; pick another --job-id");
      throw Error(ErrorCode::kUnknownJob, "no job '" + c.job + "' on this daemon");
    }
    if (c.generation && *c.generation != job.generation)
      throw Error(ErrorCode::kStaleGeneration,
                  "request from generation " + std::to_string(*c.generation) + " refused: job '" +
                      c.job + "' is at generation " + std::to_string(job.generation));
  }
  if (!checked) return;
  for (auto pid : c.pids)
    // Every uid of the process (real, effective, saved, filesystem) must
    // be the sender's: one that differs is a process whose privileges are
    // not the sender's alone (a setuid program, a root process running as
    // the sender for a while), which the daemon would otherwise move into
    // the sender's cgroup and signal at the job's end. A pid that is gone
    // gets the same sentence: a refusal tells nothing of others' processes.
    if (sole_uid(pid) != to.peer_uid)
      throw Error(ErrorCode::kPermissionDenied,
                  "pid " + std::to_string(pid) + " is not a running process of uid " +
                      std::to_string(to.peer_uid) +
                      " (real, effective, saved and filesystem uid); uid " +
                      std::to_string(to.peer_uid) + " may not claim it");
}

std::vector<int64_t> Access::slurm_narrow(int64_t pid, int64_t owner, bool wants_gpu,
                                          std::vector<int64_t> asked) const {
  if (!slurm_gpus_ || !wants_gpu || jobs_.devices().slots().empty()) return asked;
  const auto allowed = slurm_gpus_(pid, owner);
  if (asked.empty()) return allowed;
  // The client's list (SLURM_STEP_GPUS, CUDA_VISIBLE_DEVICES, --devices)
  // narrows the allocation, never widens it.
  std::vector<int64_t> both;
  for (auto d : asked)
    if (std::find(allowed.begin(), allowed.end(), d) != allowed.end()) both.push_back(d);
  if (both.empty()) {
    auto list = [](const std::vector<int64_t>& v) {
      std::string s;
      for (auto d : v) s += (s.empty() ? "" : ",") + std::to_string(d);
      return s;
    };
    throw Error(ErrorCode::kNoDevice, "none of the GPUs asked for (" + list(asked) +
                                          ") is in the Slurm job's allocation (" + list(allowed) +
                                          ")");
  }
  return both;
}

}  // namespace muster::daemon
