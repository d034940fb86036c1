#include "server/peer_links.hpp"

#include <cstring>
#include <random>
#include <utility>

#include "log.hpp"
#include "peer/secure.hpp"
#include "protocol/limits.hpp"
#include "server/frames.hpp"

namespace muster::daemon {

PeerLinks::PeerLinks(zmq::context_t& ctx, event::Loop& loop, int order,
                     const peer::Security* security, OnFrame on_frame, OnReconnect on_reconnect)
    : ctx_(ctx),
      loop_(loop),
      order_(order),
      security_(security),
      on_frame_(std::move(on_frame)),
      on_reconnect_(std::move(on_reconnect)) {}

namespace {

// 16 random bytes, the first never zero (ZeroMQ's own ids start with one;
// the reply cache tracks only chosen ids).
std::string random_routing_id() {
  std::random_device rd;
  std::string id(16, '\0');
  for (auto& c : id) c = static_cast<char>(rd() & 0xff);
  id[0] = 'L';
  return id;
}

}  // namespace

void PeerLinks::send(const std::string& name, std::string& frame) {
  auto it = links_.find(name);
  zmq::socket_t* sock = it != links_.end() ? &it->second.sock : connect(name);
  if (sock) sock->send(take_frame(frame), zmq::send_flags::dontwait);
}

zmq::socket_t* PeerLinks::connect(const std::string& name) {
  if (!security_) return nullptr;  // rendezvous refused these already
  // Three sockets a link (and its fds): past the context's socket limit or
  // the fd limit ZeroMQ throws, and the request is dropped like one whose
  // connection cannot be made (the state gives up after the peer timeout).
  try {
    return connect_now(name);
  } catch (const std::exception& e) {
    log::warning(log::peer(name), "cannot make a link to coordinator " + name + ": " + e.what());
    return nullptr;
  }
}

zmq::socket_t* PeerLinks::connect_now(const std::string& name) {
  zmq::socket_t s(ctx_, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::routing_id, random_routing_id());
  // Before connect, so that the first handshake is seen too.
  std::string at = "inproc://muster-link-monitor-" + std::to_string(++monitors_);
  if (zmq_socket_monitor(s.handle(), at.c_str(), ZMQ_EVENT_HANDSHAKE_SUCCEEDED) != 0) {
    log::warning(log::peer(name),
                 "cannot watch the link to coordinator " + name + ": " + zmq_strerror(zmq_errno()));
    return nullptr;
  }
  zmq::socket_t mon(ctx_, zmq::socket_type::pair);
  mon.set(zmq::sockopt::linger, 0);
  mon.connect(at);
  s.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(limits::kMaxFrameBytes + 4096));
  peer::make_client(s, *security_);
  s.connect("tcp://" + name);
  return &links_.try_emplace(name, *this, name, std::move(s), std::move(mon)).first->second.sock;
}

PeerLinks::Link::Link(PeerLinks& owner, std::string name_, zmq::socket_t s, zmq::socket_t mon)
    : name(std::move(name_)),
      sock(std::move(s)),
      monitor(std::move(mon)),
      event(owner.loop_, owner.order_, [this, &owner] { owner.read(*this); }),
      monitor_event(owner.loop_, owner.order_, [this, &owner] { owner.watch(*this); }) {
  event.schedule_socket(sock.handle());
  monitor_event.schedule_socket(monitor.handle());
}

// Monitor events are two frames: the event (u16) and its value (u32), then
// the endpoint.
void PeerLinks::watch(Link& link) {
  for (int n = 0; n < 64; ++n) {
    zmq::message_t head;
    if (!link.monitor.recv(head, zmq::recv_flags::dontwait)) break;
    uint16_t event = 0;
    if (head.size() >= sizeof event) std::memcpy(&event, head.data(), sizeof event);
    while (head.more()) {
      zmq::message_t rest;
      (void)link.monitor.recv(rest);
      head.move(rest);
    }
    if (event == ZMQ_EVENT_HANDSHAKE_SUCCEEDED && ++link.handshakes > 1) {
      log::notice(log::peer(link.name), "the link to coordinator " + link.name +
                                            " connected again; its requests in flight go again");
      on_reconnect_(link.name);
    }
  }
}

void PeerLinks::read(Link& link) {
  zmq::socket_t& sock = link.sock;
  for (int n = 0; n < 1024; ++n) {
    zmq::message_t msg;
    if (!sock.recv(msg, zmq::recv_flags::dontwait)) break;
    while (msg.more()) {  // a DEALER reply is one frame; drop anything else
      zmq::message_t rest;
      (void)sock.recv(rest);
    }
    on_frame_(link.name, msg);
  }
}

void PeerLinks::prune(const std::function<bool(const std::string&)>& keep) {
  std::erase_if(links_, [&](const auto& kv) { return !keep(kv.first); });
}

}  // namespace muster::daemon
