// Broadcast across nodes: muster::broadcast, and sync_model without reduce
// flags, when the job's world spans nodes (RankInfo::num_nodes > 1).
//
// Bytes cross nodes only through the daemons, never through another node's
// shared memory or /proc: the root pushes its bytes in chunks (4 MiB, each
// with its checksum) to its daemon, which passes them to the job's
// coordinator daemon (bcast_push inside Forward); one rank of every other
// node, its local rank 0 (the node's relay), pulls them through its own
// daemon (bcast_pull) into a stream (stream.hpp) that the node's
// other ranks read while it is written. On the root's node, the root's own
// stream feeds the others. The coordinator keeps a bounded window of chunks
// per broadcast and answers the root's pushes only when there is room, so
// the root, the relays and the readers all work at once, chunk by chunk,
// and no daemon ever holds the whole buffer.
//
// Where a rank has a stream (its node has other ranks), the chunks do not
// cross the local socket: the root's push names its stream and its daemon
// reads the chunk from there, and the relay's pull names its stream and its
// daemon writes the chunk there (daemon/cluster/bcast_pools.cpp); the relay
// then checks it in place. A daemon that cannot open the stream refuses the
// first such request (permission_denied, unavailable, or invalid_argument
// from a daemon without pools: pool_refused), and the rank sends the bytes
// through the socket instead, as a rank without a stream does. The chunks
// go through the coordinator, which sends one frame of each to every other
// node, unless the coordinator chose the chain for the job's round (each
// node passes them on to the next: daemon/cluster/bcast_chain.hpp).
//
//   root:   set(meta)       barrier(ready)  push chunks, write its stream   leave  barrier(done)
//   relay:  set(node meta)  barrier(ready)  get(root's meta)  pull chunks,
//                                           check, write its stream         leave  barrier(done)
//   reader:                 barrier(ready)  get(root's meta)  get(node meta)
//                                           read the stream, check                 barrier(done)
//
// The metadata (bcast::Meta) goes in the job's store, which is global for a
// job that spans nodes: the root's under muster/coll/<generation>/<seq>/<root>
// (size, chunk, checksum algorithm, signature, its stream when the root's
// node has other ranks, or an error); each relay with readers publishes its
// stream (for its own buffer's size), or its error, under .../node/<node
// rank>. Both are set before the ready barrier, so every get after it is
// answered at once, and a rank that dies before it publishes fails the
// barrier. Every chunk is checked against the root's checksum by the relay
// (as it arrives) and again by each reader (in the stream). Every rank
// enters the done barrier, whatever happened before, and only then reports
// its error: so no rank waits for one that gave up, and a rank claims
// success only past the barrier, which fails when any rank died. A relay
// that stops (its pull failed: a node was lost; its buffer is not the
// root's size) aborts its stream, so its node's readers stop too, and
// leaves the broadcast, so that the root is not held up by it.
#include "nodes.hpp"
#include "node_part.hpp"

#include <unistd.h>

#include <algorithm>
#include <deque>
#include <exception>
#include <memory>
#include <string>

#include "checksum.hpp"
#include "meta.hpp"
#include "pool.hpp"
#include "protocol/cluster_messages.hpp"
#include "session.hpp"
#include "stream.hpp"
#include "wire.hpp"

namespace muster::bcast {

NodeBroadcast::NodeBroadcast(Client& c, detail::Session& s, const std::vector<Piece>& pieces,
                             size_t total, uint64_t signature, uint32_t root, const char* what_kind,
                             std::optional<Error> local)
    : c_(c),
      conn_(s.connection()),
      info_(c.rank_info()),
      pieces_(pieces),
      total_(total),
      signature_(signature),
      root_(root),
      me_(info_.rank),
      wait_(s.wait_ms(std::nullopt)),
      seq_(static_cast<uint64_t>(c.add("muster/coll/seq/" + std::to_string(me_), 1))),
      local_(std::move(local)),
      layout_(pieces, total) {
  prefix_ = "muster/coll/" + std::to_string(info_.generation) + "/" + std::to_string(seq_);
  what_ = std::string(what_kind) + " #" + std::to_string(seq_) + " of job '" + info_.job + "'";
  const uint32_t node_base = me_ - info_.local_rank;  // global rank of local rank 0
  root_here_ = root >= node_base && root < node_base + info_.local_world_size;
  source_ = root_here_ ? root : node_base;
  root_key_ = prefix_ + "/" + std::to_string(root);
  node_key_ = root_here_ ? root_key_ : prefix_ + "/node/" + std::to_string(info_.node_rank);
  from_ = what_ + " from rank " + std::to_string(root) +
          (root_here_ || me_ == source_ ? "" : " through rank " + std::to_string(source_));
  for (const auto& p : pieces_)
    if (!local_ && !p.data && p.size)
      local_ = Error(ErrorCode::kInvalidArgument,
                     what_ + ": data is NULL on rank " + std::to_string(me_));
}

void NodeBroadcast::agrees(const Meta& m) {
  if (local_) return;
  if (m.size != total_)
    local_ = Error(ErrorCode::kInvalidArgument,
                   what_ + ": this rank's buffer has " + std::to_string(total_) + " bytes, root " +
                       std::to_string(root_) + "'s " + std::to_string(m.size));
  else if (m.signature != signature_)
    local_ = Error(ErrorCode::kInvalidArgument,
                   what_ + ": rank " + std::to_string(root_) +
                       " passed other buffers (sizes, types, order or reduce flags) than rank " +
                       std::to_string(me_));
}

void NodeBroadcast::leave(uint64_t size, uint64_t chunk, const std::string& why) {
  proto::BcastLeave l{info_.job, info_.generation, seq_, root_, info_.node_rank, size, chunk, why};
  if (why.empty())
    conn_.call<proto::Ok>(l);
  else
    conn_.post(l);  // best effort: the broadcast failed anyway
}

Meta NodeBroadcast::root_meta() {
  Meta rm = decode(c_.get(root_key_, wait_));
  if (rm.status != ErrorCode::kOk)
    throw Error(rm.status, what_ + " failed on rank " + std::to_string(root_) + ": " + rm.message);
  return rm;
}

// Before the ready barrier, the root and each relay with readers publish
// their metadata (or their error), so that after it every get is answered at
// once: a rank that dies before it publishes fails the barrier rather than
// leaving the others waiting for a key.
void NodeBroadcast::publish() {
  if (me_ != root_ && (me_ != source_ || info_.local_world_size <= 1)) return;
  const std::string& key = me_ == root_ ? root_key_ : node_key_;
  try {
    mine_.size = total_;
    mine_.algo = preferred_algo();
    mine_.signature = signature_;
    if (me_ == root_ && local_) throw *local_;
    if (total_ && info_.local_world_size > 1) {
      mine_.offset = stream_offset(mine_.size, mine_.chunk);
      pool_ = stream_open(info_.job, me_, mine_);
    } else if (total_) {
      mine_.pooled =
          Pooled::kAcrossNodes;  // nobody here reads a stream: the other nodes get chunks
    }
    c_.set(key, encode(mine_));
    published_ = key;
  } catch (const std::exception& e) {
    failed_ = as_error(e, what_);
    pool_.reset();
    try {
      c_.set(key, error_meta(*failed_));
      published_ = key;
    } catch (...) {
      // the barrier below reports what keeps the store from us
    }
  }
}

// The root: pushes every chunk (and writes its stream).
void NodeBroadcast::push() {
  if (failed_) throw *failed_;
  const Meta& m = mine_;
  const size_t chunks = (total_ + m.chunk - 1) / m.chunk;
  std::unique_ptr<uint8_t[]> staging;
  InFlight inflight{conn_, {}};
  // The daemon reads the chunks from this rank's stream, if it can.
  bool by_pool = pool_ != nullptr;
  try {
    Hasher hs(m.algo);
    for (size_t k = 0; k < chunks; ++k) {
      const size_t o = k * m.chunk, n = std::min<size_t>(m.chunk, total_ - o);
      const uint8_t* src = layout_.in_one(o, n);
      if (!src) {  // sync_model's buffers: gather the chunk
        if (!staging) staging.reset(new uint8_t[m.chunk]);
        layout_.gather(o, n, staging.get());
        src = staging.get();
      }
      hs.reset();
      if (pool_) {
        hs.copy_update(pool_->data() + m.offset + o, src, n);
        stream_publish(pool_->data(), k, hs.final(), k + 1 == chunks);
      } else {
        hs.update(src, n);
      }
      if (inflight.ids.size() == kInFlight) conn_.await<proto::Ok>(inflight.pop(), wait_);
      proto::BcastPush head{info_.job, info_.generation, seq_, root_,        total_, m.chunk,
                            k,         hs.final(),       {},   wait_.count()};
      auto with_bytes = [&] {
        return conn_.send_with([&](uint64_t id) { return push_frame(id, head, src, n); });
      };
      if (!by_pool) {
        inflight.ids.push_back(with_bytes());
        continue;
      }
      head.pool = pool_ref();
      inflight.ids.push_back(conn_.send(head));
      if (k == 0 && !pool_taken(inflight.pop())) {  // the bytes go through the socket
        by_pool = false;
        head.pool = {};
        inflight.ids.push_back(with_bytes());
      }
    }
    while (!inflight.ids.empty()) conn_.await<proto::Ok>(inflight.pop(), wait_);
    if (total_) leave(total_, m.chunk, "");
  } catch (const std::exception& e) {
    if (pool_) stream_abort(pool_->data(), m.tag);
    leave(total_, m.chunk, e.what());
    throw;
  }
}

bool NodeBroadcast::pool_taken(uint64_t id) {
  try {
    conn_.await<proto::Ok>(id, wait_);
    return true;
  } catch (const Error& e) {
    if (!pool_refused(e.code())) throw;
    return false;
  }
}

// A reader: its node's stream, checked against the root's checksums.
void NodeBroadcast::read() {
  Meta rm = root_meta();
  agrees(rm);
  if (local_) throw *local_;
  if (!rm.size) return;
  Meta m = root_here_ ? rm : decode(c_.get(node_key_, wait_));
  if (m.status != ErrorCode::kOk)
    throw Error(m.status, from_ + ": rank " + std::to_string(source_) + " failed: " + m.message);
  if (m.pooled != Pooled::kStream || m.size != rm.size || m.chunk != rm.chunk)
    throw Error(m.pooled != Pooled::kStream ? ErrorCode::kInternal : ErrorCode::kInvalidArgument,
                from_ + ": rank " + std::to_string(source_) +
                    " announced no stream of the root's size for this node (its buffer has " +
                    std::to_string(m.size) + " bytes, the root's " + std::to_string(rm.size) + ")");
  try {
    read_stream(rm, m);
  } catch (...) {
    View::drop(info_.job, me_, source_);  // its writer may be gone: let its pool go
    throw;
  }
}

void NodeBroadcast::read_stream(const Meta& rm, const Meta& m) {
  auto view = View::of(info_.job, me_, source_);
  if (!view->attach(m))
    throw Error(ErrorCode::kPermissionDenied,
                from_ + ": cannot open rank " + std::to_string(source_) +
                    "'s broadcast pool (/proc/" + std::to_string(m.pid) + "/fd/" +
                    std::to_string(m.fd) +
                    "): the ranks of a node must run as one user to share it");
  const uint8_t* base = view->data();
  auto* sums = reinterpret_cast<const uint64_t*>(base + sizeof(StreamHeader));
  const size_t chunks = (m.size + m.chunk - 1) / m.chunk;
  Hasher hs(rm.algo);  // the root's checksums, whoever wrote the stream
  for (size_t k = 0; k < chunks; ++k) {
    stream_wait(base, m, k, wait_, from_);
    const size_t o = k * m.chunk, n = std::min<size_t>(m.chunk, m.size - o);
    hs.reset();
    layout_.scatter(o, base + m.offset + o, n, &hs);
    if (hs.final() != __atomic_load_n(&sums[k], __ATOMIC_RELAXED))
      throw Error(ErrorCode::kInternal,
                  from_ + ": chunk " + std::to_string(k) + " (from byte " + std::to_string(o) +
                      ") does not match its checksum: the shared memory was changed or damaged");
  }
  if (__atomic_load_n(&reinterpret_cast<const StreamHeader*>(base)->tag, __ATOMIC_ACQUIRE) != m.tag)
    throw Error(ErrorCode::kInternal,
                from_ + ": the pool holds another broadcast than the one announced");
}

// Every rank meets the others at the done barrier, whatever happened before;
// a dead rank or a lost node fails the barrier, and that explains any error
// before it too. A rank told `restarted` (the coordinating daemon restarted
// and its chunks died with it) says so in the store before the barrier, so
// that after it every rank knows, and all start the broadcast again.
void NodeBroadcast::finish(std::exception_ptr err) {
  const std::string again_key = prefix_ + "/again";
  if (err) {
    try {
      std::rethrow_exception(err);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::kRestarted) {
        try {
          c_.set(again_key, "1");
        } catch (...) {
          // the barrier below still meets the others; this rank reports its error
        }
      }
    } catch (...) {
    }
  }
  try {
    c_.barrier(prefix_ + "/done");
  } catch (const Error& e) {
    if (!err || e.code() == ErrorCode::kPeerExited) throw;
  }
  if (c_.try_get(again_key)) throw StartAgain{};
  if (err) std::rethrow_exception(err);
  // Everyone has read the metadata: it goes (after a failure it stays, a few
  // bytes, for the job's life, like the one-node path's).
  if (!published_.empty()) {
    try {
      c_.remove(published_);
    } catch (...) {
    }
  }
}

void NodeBroadcast::run() {
  publish();
  std::exception_ptr err;
  try {
    c_.barrier(prefix_ + "/ready");
    if (me_ == root_)
      push();
    else if (me_ == source_)
      pull();
    else
      read();
  } catch (...) {
    err = std::current_exception();
  }
  finish(err);
}

void broadcast_across_nodes(Client& c, detail::Session& s, const std::vector<Piece>& pieces,
                            size_t total, uint64_t signature, uint32_t root, const char* what,
                            std::optional<Error> local) {
  // A restart of the coordinating daemon costs the broadcast it interrupted,
  // not the job: it goes again under the next sequence number. Bounded, for
  // a coordinator that keeps restarting.
  constexpr int kAttempts = 5;
  for (int attempt = 1;; ++attempt) {
    try {
      NodeBroadcast(c, s, pieces, total, signature, root, what, local).run();
      return;
    } catch (const StartAgain&) {
      if (attempt == kAttempts)
        throw Error(ErrorCode::kRestarted, std::string(what) + " of job '" + c.rank_info().job +
                                               "': the coordinating " +
                                               "daemon restarted during each of " +
                                               std::to_string(kAttempts) + " attempts");
    }
  }
}

}  // namespace muster::bcast
