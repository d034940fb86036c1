// Broadcast across nodes: Client::broadcast, and sync_model without reduce
// flags, when the job's world spans nodes (RankInfo::num_nodes > 1).
//
// Bytes cross nodes only through the daemons, never through another node's
// shared memory or /proc: the root pushes its bytes in chunks (4 MiB, each
// with its checksum) to its daemon, which passes them to the job's
// coordinator daemon (bcast_push inside Forward); one rank of every other
// node, its local rank 0 (the node's relay), pulls them through its own
// daemon (bcast_pull) and writes them into a stream (broadcast_stream.hpp)
// that the node's other ranks read while it is written. On the root's node,
// the root's own stream feeds the others. The coordinator keeps a bounded
// window of chunks per broadcast and answers the root's pushes only when
// there is room, so the root, the relays and the readers all work at once,
// chunk by chunk, and no daemon ever holds the whole buffer. (A first
// version: the chunks go through the coordinator, which sends each to every
// other node; a tree of daemons would spread that.)
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
#include "broadcast_nodes.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "broadcast_checksum.hpp"
#include "broadcast_layout.hpp"
#include "broadcast_meta.hpp"
#include "broadcast_pool.hpp"
#include "broadcast_shm.hpp"
#include "broadcast_stream.hpp"
#include "client_impl.hpp"
#include "protocol/cluster_messages.hpp"

namespace muster {

using namespace bcast;
using Piece = NodeBroadcast::Piece;

namespace {

constexpr size_t kInFlight = 4;  // pushes or pulls a rank has on the way at once

// Requests on the client's socket with several in flight: their replies may
// come in any order; ones nobody waits for any more are dropped (like call()
// does). Replies are decoded in place (binary fields point into the frame,
// which a Got keeps). Impl is Client::Impl (a template, so that only
// NodeBroadcast, Client's friend, names it).
template <class Impl>
class Wire {
 public:
  explicit Wire(Impl& im) : im_(im) {}

  struct Got {
    zmq::message_t frame;
    proto::Envelope env;  // points into frame
  };

  template <class M>
  uint64_t send(const M& msg) {
    uint64_t id = im_.next_id++;
    auto frame = proto::encode(id, msg);
    send_frame(zmq::message_t(frame.data(), frame.size()));
    waiting_.insert(id);
    return id;
  }

  // A bcast_push whose chunk is written into the frame once, and the frame
  // handed to ZeroMQ as it is.
  uint64_t push(const proto::BcastPush& head, const uint8_t* data, size_t n) {
    uint64_t id = im_.next_id++;
    codec::Buffer buf(n + 512);
    codec::Packer p(buf);
    proto::pack_envelope_head(p, id, static_cast<uint16_t>(proto::MsgType::kBcastPush));
    head.pack_head(p, n);
    buf.write(reinterpret_cast<const char*>(data), n);
    const size_t size = buf.size();
    send_frame(zmq::message_t(
        buf.release(), size, [](void* d, void*) { ::free(d); }, nullptr));
    waiting_.insert(id);
    return id;
  }

  // The reply to request id, or the daemon's error thrown.
  template <class Reply>
  Reply take(uint64_t id, std::chrono::milliseconds extra_wait) {
    auto got = take_got(id, Reply::kType, extra_wait);
    return Reply::unpack(got->env.payload);
  }
  std::unique_ptr<Got> take_got(uint64_t id, proto::MsgType type,
                                std::chrono::milliseconds extra_wait) {
    auto got = wait(id, im_.opts.request_timeout + extra_wait);
    const auto& env = got->env;
    if (env.type == static_cast<uint16_t>(proto::MsgType::kErrorReply)) {
      auto err = proto::ErrorReply::unpack(env.payload);
      throw Error(static_cast<ErrorCode>(err.code), err.message);
    }
    if (env.type != static_cast<uint16_t>(type))
      throw Error(ErrorCode::kBadMessage, std::string("musterd answered ") +
                                              proto::type_name(env.type) + " instead of " +
                                              proto::type_name(static_cast<uint16_t>(type)));
    return got;
  }

 private:
  void send_frame(zmq::message_t msg) {
    for (;;) {
      try {
        im_.sock.send(msg, zmq::send_flags::none);
        return;
      } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) throw Error(ErrorCode::kInternal, e.what());
      }
    }
  }

  std::unique_ptr<Got> wait(uint64_t id, std::chrono::milliseconds timeout) {
    waiting_.erase(id);
    if (auto it = early_.find(id); it != early_.end()) {
      auto got = std::move(it->second);
      early_.erase(it);
      return got;
    }
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() < 0) left = std::chrono::milliseconds(0);
      zmq::pollitem_t item{im_.sock.handle(), 0, ZMQ_POLLIN, 0};
      try {
        zmq::poll(&item, 1, left);
      } catch (const zmq::error_t& e) {
        if (e.num() == EINTR) continue;
        throw Error(ErrorCode::kInternal, e.what());
      }
      if (!(item.revents & ZMQ_POLLIN))
        throw Error(ErrorCode::kUnavailable, "no reply from musterd at " + im_.opts.endpoint +
                                                 " within " + std::to_string(timeout.count()) +
                                                 " ms");
      auto got = std::make_unique<Got>();  // on the heap: env points into frame
      if (!im_.sock.recv(got->frame, zmq::recv_flags::dontwait)) continue;
      im_.check_reply(got->frame);  // another uid's daemon gets no say (common/trust.hpp)
      try {
        got->env = proto::decode_envelope(got->frame.data(), got->frame.size(), true);
      } catch (const Error& e) {
        throw Error(ErrorCode::kBadMessage, std::string("bad reply from musterd: ") + e.what());
      }
      const uint64_t rid = got->env.request_id;
      if (rid == id) return got;
      if (waiting_.count(rid)) early_.emplace(rid, std::move(got));
    }
  }

  Impl& im_;
  std::set<uint64_t> waiting_;                      // sent, not yet taken
  std::map<uint64_t, std::unique_ptr<Got>> early_;  // replies that came before they were taken
};

}  // namespace

void NodeBroadcast::run(Client& c, const std::vector<Piece>& pieces, size_t total,
                        uint64_t signature, uint32_t root, const char* what_kind,
                        std::optional<Error> local) {
  Client::Impl& im = *c.impl_;
  const RankInfo info = c.rank_info();
  const uint32_t me = info.rank;
  const auto wait = std::chrono::milliseconds(im.wait_ms(std::nullopt));
  const uint64_t seq = static_cast<uint64_t>(c.add("muster/coll/seq/" + std::to_string(me), 1));
  const std::string prefix =
      "muster/coll/" + std::to_string(info.generation) + "/" + std::to_string(seq);
  const std::string what =
      std::string(what_kind) + " #" + std::to_string(seq) + " of job '" + info.job + "'";
  const uint32_t node_base = me - info.local_rank;  // global rank of local rank 0
  const bool root_here = root >= node_base && root < node_base + info.local_world_size;
  const uint32_t source = root_here ? root : node_base;  // who feeds this node's stream
  const std::string root_key = prefix + "/" + std::to_string(root);
  const std::string node_key =
      root_here ? root_key : prefix + "/node/" + std::to_string(info.node_rank);
  const std::string from =
      what + " from rank " + std::to_string(root) +
      (root_here || me == source ? "" : " through rank " + std::to_string(source));
  for (const auto& p : pieces)
    if (!local && !p.data && p.size)
      local =
          Error(ErrorCode::kInvalidArgument, what + ": data is NULL on rank " + std::to_string(me));
  // A rank's buffers must match the root's (Meta::size and signature).
  auto agrees = [&](const Meta& m) {
    if (local) return;
    if (m.size != total)
      local = Error(ErrorCode::kInvalidArgument,
                    what + ": this rank's buffer has " + std::to_string(total) + " bytes, root " +
                        std::to_string(root) + "'s " + std::to_string(m.size));
    else if (m.signature != signature)
      local = Error(ErrorCode::kInvalidArgument,
                    what + ": rank " + std::to_string(root) +
                        " passed other buffers (sizes, types, order or reduce flags) than rank " +
                        std::to_string(me));
  };
  Layout layout(pieces, total);
  Wire<Client::Impl> wire(im);
  auto bcast_leave = [&](uint64_t size, uint64_t chunk, const std::string& why) {
    proto::BcastLeave l{info.job, info.generation, seq, root, info.node_rank, size, chunk, why};
    if (why.empty())
      wire.template take<proto::Ok>(wire.send(l), {});
    else
      wire.send(l);  // best effort: the broadcast failed anyway
  };
  // This rank's stream for the other ranks of its node: header first, then
  // the metadata that names it.
  std::shared_ptr<Pool> pool;
  auto open_stream = [&](Meta& m) {
    m.offset = stream_offset(m.size, m.chunk);
    m.tag = nonce() | 1;
    pool = Pool::of(info.job, me);
    pool->reserve(m.offset + m.size);
    auto* h = reinterpret_cast<StreamHeader*>(pool->data());
    __atomic_store_n(&h->ready, 0u, __ATOMIC_RELAXED);
    __atomic_store_n(&h->tag, m.tag, __ATOMIC_RELEASE);
    m.segment = pool->name();
    m.pooled = 2;
    m.pid = ::getpid();
    m.fd = pool->fd();
    m.dev = pool->dev();
    m.ino = pool->ino();
  };
  auto error_meta = [](const Error& e) {
    Meta m;
    m.status = e.code();
    m.message = e.what();
    return encode(m);
  };
  std::string published;  // the key this rank set, removed after a completed broadcast
  std::exception_ptr err;
  auto as_error = [&](const std::exception& e) {
    if (auto* me_err = dynamic_cast<const Error*>(&e)) return *me_err;
    return Error(ErrorCode::kInternal, what + ": " + e.what());
  };
  // Before the ready barrier, the root and each relay with readers publish
  // their metadata (or their error), so that after it every get is answered
  // at once: a rank that dies before it publishes fails the barrier rather
  // than leaving the others waiting for a key.
  std::optional<Error> failed;  // this rank's own failure, to report after the barrier
  Meta mine;                    // the root's, or the relay's stream
  if (me == root || (me == source && info.local_world_size > 1)) {
    const std::string& key = me == root ? root_key : node_key;
    try {
      mine.size = total;
      mine.algo = preferred_algo();
      mine.signature = signature;
      if (me == root && local) throw *local;
      if (total && info.local_world_size > 1)
        open_stream(mine);
      else if (total)
        mine.pooled = 3;  // nobody here reads a stream: the other nodes get chunks
      c.set(key, encode(mine));
      published = key;
    } catch (const std::exception& e) {
      failed = as_error(e);
      pool.reset();
      try {
        c.set(key, error_meta(*failed));
        published = key;
      } catch (...) {
        // the barrier below reports what keeps the store from us
      }
    }
  }
  try {
    c.barrier(prefix + "/ready");
    if (me == root) {
      // The root: push every chunk (and write its stream).
      if (failed) throw *failed;
      const Meta& m = mine;
      const size_t chunks = (total + m.chunk - 1) / m.chunk;
      std::unique_ptr<uint8_t[]> staging;
      std::deque<uint64_t> inflight;
      try {
        Hasher hs(m.algo);
        for (size_t k = 0; k < chunks; ++k) {
          const size_t o = k * m.chunk, n = std::min<size_t>(m.chunk, total - o);
          const uint8_t* src = layout.in_one(o, n);
          if (!src) {  // sync_model's buffers: gather the chunk
            if (!staging) staging.reset(new uint8_t[m.chunk]);
            layout.gather(o, n, staging.get());
            src = staging.get();
          }
          hs.reset();
          if (pool) {
            hs.copy_update(pool->data() + m.offset + o, src, n);
            stream_publish(pool->data(), k, hs.final(), k + 1 == chunks);
          } else {
            hs.update(src, n);
          }
          if (inflight.size() == kInFlight) {
            wire.take<proto::Ok>(inflight.front(), wait);
            inflight.pop_front();
          }
          inflight.push_back(wire.push({info.job,
                                        info.generation,
                                        seq,
                                        root,
                                        total,
                                        m.chunk,
                                        k,
                                        hs.final(),
                                        {},
                                        wait.count()},
                                       src, n));
        }
        for (; !inflight.empty(); inflight.pop_front())
          wire.take<proto::Ok>(inflight.front(), wait);
        if (total) bcast_leave(total, m.chunk, "");
      } catch (const std::exception& e) {
        if (pool) stream_abort(pool->data(), m.tag);
        bcast_leave(total, m.chunk, e.what());
        throw;
      }
    } else if (me == source) {
      // A node's relay: pull every chunk through this node's daemon into
      // its stream (and its buffers).
      Meta rm = decode(c.get(root_key, wait));
      const size_t size = rm.size;
      bool joined = size > 0;  // in the coordinator's list of pulling nodes
      try {
        if (rm.status != ErrorCode::kOk)
          throw Error(rm.status,
                      what + " failed on rank " + std::to_string(root) + ": " + rm.message);
        if (size && (rm.chunk < proto::kMinBcastChunk || rm.chunk > proto::kMaxBcastChunk))
          throw Error(ErrorCode::kInternal, from + ": chunks of " + std::to_string(rm.chunk) +
                                                " bytes are outside the protocol's limits");
        agrees(rm);
        if (failed) throw *failed;  // no stream for this node's readers
        // A stream made for another size or chunking cannot carry the root's
        // bytes (agrees() said why, unless the chunking differs).
        if (pool ? mine.size != size || mine.chunk != rm.chunk
                 : info.local_world_size > 1 && size > 0)
          throw local
              ? *local
              : Error(ErrorCode::kInternal, from + ": this node's stream has chunks of " +
                                                std::to_string(mine.chunk) + " bytes, the root's " +
                                                std::to_string(rm.chunk));
        // With nobody to feed and nothing to keep, stop pulling now.
        if (local && !pool) throw *local;
        const size_t chunks = (size + rm.chunk - 1) / rm.chunk;
        std::deque<uint64_t> inflight;
        size_t next = 0;
        Hasher hs(rm.algo);
        for (size_t k = 0; k < chunks; ++k) {
          for (; next < chunks && next < k + kInFlight; ++next)
            inflight.push_back(
                wire.send(proto::BcastPull{info.job, info.generation, seq, root, info.node_rank,
                                           size, rm.chunk, k, next, wait.count()}));
          auto got = wire.take_got(inflight.front(), proto::MsgType::kBcastChunk, wait);
          inflight.pop_front();
          auto ch = proto::BcastChunkView::unpack(got->env.payload);
          const size_t o = k * rm.chunk, n = std::min<size_t>(rm.chunk, size - o);
          if (ch.index != k || ch.data.size() != n)
            throw Error(ErrorCode::kBadMessage,
                        from + ": the daemon sent chunk " + std::to_string(ch.index) + " of " +
                            std::to_string(ch.data.size()) + " bytes for chunk " +
                            std::to_string(k) + " of " + std::to_string(n));
          auto* bytes = reinterpret_cast<const uint8_t*>(ch.data.data());
          hs.reset();
          if (pool)
            hs.copy_update(pool->data() + mine.offset + o, bytes, n);
          else
            layout.scatter(o, bytes, n, &hs);
          if (hs.final() != ch.sum)
            throw Error(ErrorCode::kInternal,
                        from + ": chunk " + std::to_string(k) + " (from byte " + std::to_string(o) +
                            ") does not match the root's checksum: it was damaged on the way");
          if (pool) {
            stream_publish(pool->data(), k, ch.sum, k + 1 == chunks);
            if (!local) layout.scatter(o, pool->data() + mine.offset + o, n, nullptr);
          }
        }
        if (joined) bcast_leave(size, rm.chunk, "");
        joined = false;
      } catch (const std::exception& e) {
        if (pool) stream_abort(pool->data(), mine.tag);
        if (joined) bcast_leave(size, rm.chunk, e.what());
        throw;
      }
    } else {
      // A reader: its node's stream, checked against the root's checksums.
      Meta rm = decode(c.get(root_key, wait));
      if (rm.status != ErrorCode::kOk)
        throw Error(rm.status,
                    what + " failed on rank " + std::to_string(root) + ": " + rm.message);
      agrees(rm);
      if (local) throw *local;
      if (rm.size) {
        Meta m = root_here ? rm : decode(c.get(node_key, wait));
        if (m.status != ErrorCode::kOk)
          throw Error(m.status,
                      from + ": rank " + std::to_string(source) + " failed: " + m.message);
        if (m.pooled != 2 || m.size != rm.size || m.chunk != rm.chunk)
          throw Error(m.pooled != 2 ? ErrorCode::kInternal : ErrorCode::kInvalidArgument,
                      from + ": rank " + std::to_string(source) +
                          " announced no stream of the root's size for this node (its buffer "
                          "has " +
                          std::to_string(m.size) + " bytes, the root's " + std::to_string(rm.size) +
                          ")");
        try {
          auto view = View::of(info.job, me, source);
          if (!view->attach(m))
            throw Error(ErrorCode::kPermissionDenied,
                        from + ": cannot open rank " + std::to_string(source) +
                            "'s broadcast pool (/proc/" + std::to_string(m.pid) + "/fd/" +
                            std::to_string(m.fd) +
                            "): the ranks of a node must run as one user to share it");
          const uint8_t* base = view->data();
          auto* sums = reinterpret_cast<const uint64_t*>(base + sizeof(StreamHeader));
          const size_t chunks = (m.size + m.chunk - 1) / m.chunk;
          Hasher hs(rm.algo);  // the root's checksums, whoever wrote the stream
          for (size_t k = 0; k < chunks; ++k) {
            stream_wait(base, m, k, wait, from);
            const size_t o = k * m.chunk, n = std::min<size_t>(m.chunk, m.size - o);
            hs.reset();
            layout.scatter(o, base + m.offset + o, n, &hs);
            if (hs.final() != __atomic_load_n(&sums[k], __ATOMIC_RELAXED))
              throw Error(ErrorCode::kInternal,
                          from + ": chunk " + std::to_string(k) + " (from byte " +
                              std::to_string(o) +
                              ") does not match its checksum: the shared memory was changed or "
                              "damaged");
          }
          if (__atomic_load_n(&reinterpret_cast<const StreamHeader*>(base)->tag,
                              __ATOMIC_ACQUIRE) != m.tag)
            throw Error(ErrorCode::kInternal,
                        from + ": the pool holds another broadcast than the one announced");
        } catch (...) {
          View::drop(info.job, me, source);  // its writer may be gone: let its pool go
          throw;
        }
      }
    }
  } catch (...) {
    err = std::current_exception();
  }
  // Every rank meets the others here, whatever happened above; a dead rank
  // or a lost node fails the barrier, and that explains any error above too.
  try {
    c.barrier(prefix + "/done");
  } catch (const Error& e) {
    if (!err || e.code() == ErrorCode::kPeerExited) throw;
  }
  if (err) std::rethrow_exception(err);
  // Everyone has read the metadata: it goes (after a failure it stays, a few
  // bytes, for the job's life, like the one-node path's).
  if (!published.empty()) {
    try {
      c.remove(published);
    } catch (...) {
    }
  }
}

}  // namespace muster
