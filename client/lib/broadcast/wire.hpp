// The wire-level pieces of a broadcast across nodes (nodes.cpp):
// requests in flight on a rank's connection, a push's frame made without a
// second copy of its chunk, and errors as they are published in the store.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <deque>
#include <exception>
#include <string>
#include <zmq.hpp>

#include "connection.hpp"
#include "meta.hpp"
#include "muster/error.hpp"
#include "protocol/cluster_messages.hpp"

namespace muster::bcast {

constexpr size_t kInFlight = 4;  // pushes or pulls a rank has on the way at once

// Requests in flight on the connection; the ones still there when it goes
// (after an error) are given up.
struct InFlight {
  detail::Connection& conn;
  std::deque<uint64_t> ids;
  ~InFlight() {
    for (uint64_t id : ids) conn.forget(id);
  }
  uint64_t pop() {
    uint64_t id = ids.front();
    ids.pop_front();
    return id;
  }
};

// A bcast_push whose chunk is written into the frame once, and the frame
// handed to ZeroMQ as it is.
inline zmq::message_t push_frame(uint64_t id, const proto::BcastPush& head, const uint8_t* data,
                                 size_t n) {
  codec::Buffer buf(n + 512);
  codec::Packer p(buf);
  proto::pack_envelope_head(p, id, static_cast<uint16_t>(proto::MsgType::kBcastPush));
  head.pack_head(p, n);
  buf.write(reinterpret_cast<const char*>(data), n);
  const size_t size = buf.size();
  return zmq::message_t(
      buf.release(), size, [](void* d, void*) { ::free(d); }, nullptr);
}

inline Error as_error(const std::exception& e, const std::string& what) {
  if (auto* err = dynamic_cast<const Error*>(&e)) return *err;
  return Error(ErrorCode::kInternal, what + ": " + e.what());
}

inline std::string error_meta(const Error& e) {
  Meta m;
  m.status = e.code();
  m.message = e.what();
  return encode(m);
}

}  // namespace muster::bcast
