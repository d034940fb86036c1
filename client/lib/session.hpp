// A Client's session with its node's daemon: the connection, the options it
// was opened with and the rank it joined. Shared by the files of client/lib
// that add services to muster::Client (store, broadcast, shards, NCCL ids,
// launcher calls). Not installed. Member functions of Client hold it as
// session_; the free functions of the collectives and the launcher API reach
// it through detail::session_of(Client&), declared in muster/client.hpp.
#pragma once

#include <algorithm>
#include <optional>

#include "connection.hpp"
#include "muster/client.hpp"
#include "protocol/limits.hpp"
#include "protocol/messages.hpp"

namespace muster::detail {

class Session {
 public:
  // Resolves the endpoint and MUSTER_TIMEOUT_S, then connects.
  explicit Session(ClientOptions options);

  const ClientOptions& options() const { return opts_; }
  Connection& connection() { return conn_; }

  // One request, one reply (see Connection::call).
  template <class R, class M>
  R call(const M& msg, std::chrono::milliseconds extra_wait = {}) {
    return conn_.call<R>(msg, extra_wait);
  }

  bool joined() const { return info_.has_value(); }
  void joined(const RankInfo& info) { info_ = info; }
  void left() { info_.reset(); }
  // This rank; throws unless joined.
  const RankInfo& rank() const {
    if (!info_)
      throw Error(ErrorCode::kInvalidArgument,
                  "this client has not joined a job; call join() first");
    return *info_;
  }
  const std::string& job() const { return rank().job; }
  // The generation fence of store requests and barriers: the generation
  // this client joined, so a rank of an older generation cannot publish into
  // (or wait on) a newer one.
  std::optional<uint64_t> generation() const {
    if (!info_) return std::nullopt;
    return info_->generation;
  }
  // A wait's timeout for the daemon: the caller's, else the client's default.
  int64_t wait_ms(std::optional<std::chrono::milliseconds> t) const {
    auto ms = (t ? *t : opts_.wait_timeout).count();
    return std::clamp<int64_t>(ms, 0, limits::kMaxTimeoutMs);
  }

 private:
  static ClientOptions resolved(ClientOptions o);

  ClientOptions opts_;
  Connection conn_;
  std::optional<RankInfo> info_;
};

}  // namespace muster::detail
