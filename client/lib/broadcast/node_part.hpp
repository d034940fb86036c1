// One rank's part in one broadcast across nodes (see nodes.cpp,
// which has the whole story; the relay's pulls are in pull.cpp).
// Not installed.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layout.hpp"
#include "meta.hpp"
#include "muster/client.hpp"
#include "pool.hpp"
#include "protocol/cluster_messages.hpp"
#include "session.hpp"

// Internal to libmuster: hidden, so the version script's muster::* does not
// export it.
#pragma GCC visibility push(hidden)
namespace muster::bcast {

// The codes a daemon answers a request that names a rank's stream with
// when it will not open it (permission_denied: not allowed; unavailable:
// too many open; invalid_argument: a daemon from before pools, which finds
// the request has no bytes): the rank then sends the bytes itself.
inline bool pool_refused(ErrorCode code) {
  return code == ErrorCode::kPermissionDenied || code == ErrorCode::kUnavailable ||
         code == ErrorCode::kInvalidArgument;
}

// Every rank starts the broadcast again (NodeBroadcast::finish).
struct StartAgain {};

// One rank's part in one broadcast across nodes (see the top of this file).
class NodeBroadcast {
 public:
  NodeBroadcast(Client& c, detail::Session& s, const std::vector<Piece>& pieces, size_t total,
                uint64_t signature, uint32_t root, const char* what_kind,
                std::optional<Error> local);
  void run();

 private:
  void publish();
  void push();
  void pull();
  void pull_chunks(const Meta& rm);
  void read();
  void read_stream(const Meta& rm, const Meta& m);
  void finish(std::exception_ptr err);
  // The root's metadata, or the error it published thrown.
  Meta root_meta();
  // A rank's buffers must match the root's (Meta::size and signature).
  void agrees(const Meta& m);
  // This rank's stream as its daemon opens it (cluster/broadcast/pool_files.hpp).
  proto::PoolRef pool_ref() const {
    return proto::PoolRef{pool_->fd(), pool_->dev(), pool_->ino(), mine_.offset};
  }
  // The answer to the root's first push that named its stream: false when
  // the daemon cannot open the stream (then the bytes go in the pushes).
  bool pool_taken(uint64_t id);
  // Tells the coordinator this node is done with the broadcast (why: the
  // error that stopped it, else empty).
  void leave(uint64_t size, uint64_t chunk, const std::string& why);

  Client& c_;
  detail::Connection& conn_;
  const RankInfo info_;
  const std::vector<Piece>& pieces_;
  const size_t total_;
  const uint64_t signature_;
  const uint32_t root_, me_;
  const std::chrono::milliseconds wait_;
  const uint64_t seq_;
  std::string prefix_, what_;
  uint32_t source_ = 0;  // who feeds this node's stream
  bool root_here_ = false;
  std::string root_key_, node_key_, from_;
  std::optional<Error> local_;   // an error of this rank, reported through the collective
  std::optional<Error> failed_;  // this rank's own failure, to report after the barrier
  Layout layout_;
  std::shared_ptr<Pool> pool_;  // this rank's stream for the other ranks of its node
  Meta mine_;                   // the root's, or the relay's stream
  std::string published_;       // the key this rank set, removed after a completed broadcast
};

}  // namespace muster::bcast
#pragma GCC visibility pop
