// Each user's jobs in their own namespace. A local request names a job by
// the name its user gave ("train42"); before anything else reads it, the
// daemon makes that name the job's key in the sender's namespace
// (common/job_id.hpp job_key: "train42~1000" for uid 1000, the name alone
// for root), rewriting the request's job field in place. Every handler,
// every table and every peer daemon then sees only keys, so two users'
// "train42" are two jobs everywhere a job is kept: the job table, stores,
// waits, cgroups, state records, the coordinator's tables across nodes.
// Nothing can be squatted, raced or joined across users by name.
//
// Root reaches another user's job only by saying so: an `owner` field
// (`--owner` on the command line, an owner argument in the APIs) on a
// request that creates or joins a job, or the key a reply gave it back
// for the requests after. Root's join into another user's job must come
// from a process that job's launcher registered (the worker, or a process
// it started): an owner in an environment root's process inherited gets
// nobody into a job it was not started for. Every other sender may name
// only its own jobs; an owner field naming another uid is refused.
#include <algorithm>

#include "core/access.hpp"
#include "core/job_scope.hpp"
#include "job_id.hpp"
#include "liveness/pidwatch.hpp"
#include "protocol/limits.hpp"

namespace muster::daemon {

using proto::MsgType;

namespace {

// The payload map's value for `field`, or null (unpack() reports a missing
// or mistyped field with its own sentence). The first, as MapReader reads
// it; a second is refused, so that no reader can ever see another one than
// the name made a key here.
msgpack::object* field_of(const msgpack::object& payload, std::string_view field) {
  if (payload.type != msgpack::type::MAP) return nullptr;
  msgpack::object* found = nullptr;
  for (uint32_t i = 0; i < payload.via.map.size; ++i) {
    auto& kv = payload.via.map.ptr[i];
    if (kv.key.type != msgpack::type::STR ||
        std::string_view(kv.key.via.str.ptr, kv.key.via.str.size) != field)
      continue;
    if (found)
      throw Error(ErrorCode::kBadMessage, "the request names '" + std::string(field) + "' twice");
    found = &kv.val;
  }
  return found;
}

// The owner a request names: a uid (0 to 2^32-1), absent = none.
std::optional<int64_t> owner_field(const msgpack::object& payload) {
  const msgpack::object* o = field_of(payload, "owner");
  if (!o) return std::nullopt;
  if (o->type != msgpack::type::POSITIVE_INTEGER || o->via.u64 > 0xffffffffULL)
    throw Error(ErrorCode::kInvalidArgument, "'owner' must be a uid (0 to 4294967295)");
  return static_cast<int64_t>(o->via.u64);
}

std::string owner_text(int64_t uid) {
  return "uid " + std::to_string(uid);
}

}  // namespace

std::string JobScope::speak(std::string text) const {
  if (key == name || spoken() == key) return text;
  const std::string from = "'" + key + "'", to = "'" + name + "'";
  for (size_t at = 0; (at = text.find(from, at)) != std::string::npos; at += to.size())
    text.replace(at, from.size(), to);
  return text;
}

JobScope Access::scope_job(const ReplyTo& to, const proto::Envelope& env,
                           const proto::MessageTraits& t) {
  JobScope s;
  if (t.sender != proto::Sender::kJobOwner) return s;
  msgpack::object* job = field_of(env.payload, "job");
  if (!job || job->type != msgpack::type::STR || job->via.str.size == 0 ||
      job->via.str.size > limits::kMaxJobIdBytes)
    return s;  // unpack() refuses it with the field's own sentence
  s.name.assign(job->via.str.ptr, job->via.str.size);
  const bool root = to.peer_uid <= 0;
  auto named = owner_field(env.payload);
  if (auto tilde = s.name.find('~'); tilde != std::string::npos) {
    // A key: what a reply gave root back after it named another user's job.
    // Only root may speak in keys, and not to create or join a job: those
    // say the owner in their own field.
    if (!root || t.creates_job || named)
      throw Error(ErrorCode::kInvalidArgument, job_id_problem(s.name));
    if (auto why = job_key_problem(s.name); !why.empty())
      throw Error(ErrorCode::kInvalidArgument, why);
    s.key = s.name;
    s.owner = job_key_owner(s.key);
    s.other_owner = true;
    s.name = std::string(job_name(s.key));
    return s;
  }
  if (auto why = job_id_problem(s.name); !why.empty())
    throw Error(ErrorCode::kInvalidArgument, why);
  s.owner = to.peer_uid;
  if (named && *named != to.peer_uid) {
    if (!root)
      throw Error(ErrorCode::kPermissionDenied,
                  "only root may name another user's job; " + owner_text(to.peer_uid) +
                      " asked for the job '" + s.name + "' of " + owner_text(*named) +
                      ", and nothing was changed");
    s.owner = *named;
    s.other_owner = *named > 0;
  }
  s.key = job_key(s.owner, s.name);
  // In place: the key lives in this Access until the next request, past the
  // handler's reading of the payload (handlers copy what they keep).
  scoped_key_ = s.key;
  job->via.str.ptr = scoped_key_.data();
  job->via.str.size = static_cast<uint32_t>(scoped_key_.size());
  if (s.other_owner && env.type == static_cast<uint16_t>(MsgType::kJoin))
    check_registered(s, codec::MapReader(env.payload, t.name).i64("pid", 1, limits::kMaxPid));
  return s;
}

void Access::check_registered(const JobScope& s, int64_t pid) const {
  const Job* job = jobs_.find(s.key);
  bool registered = job && std::any_of(job->slots.begin(), job->slots.end(), [&](const Slot& x) {
                      return (x.state == SlotState::kRunning &&
                              (x.pid == pid || PidWatch::is_ancestor(x.pid, pid))) ||
                             (x.state == SlotState::kJoined && x.joined_pid == pid);
                    });
  if (!registered)
    throw Error(ErrorCode::kPermissionDenied,
                "root joins the job '" + s.name + "' of " + owner_text(s.owner) +
                    " only from a process its launcher registered (muster run --owner); pid " +
                    std::to_string(pid) + " is none of them");
}

}  // namespace muster::daemon
