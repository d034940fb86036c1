#include "peer/zap_handler.hpp"

#include <iterator>
#include <vector>
#include <zmq_addon.hpp>

#include "log.hpp"
#include "muster/error.hpp"
#include "trust.hpp"

namespace muster::daemon::peer {

namespace {
constexpr auto kRefusalLogInterval = std::chrono::minutes(1);
}

void make_local_server(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::zap_domain, kLocalZapDomain);
}

void make_plain_server(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::zap_domain, kZapDomain);
}

ZapHandler::ZapHandler(zmq::context_t& ctx, const Security* sec, ZapPolicy policy)
    : socket_(ctx, zmq::socket_type::rep), policy_(std::move(policy)) {
  socket_.set(zmq::sockopt::linger, 0);
  try {
    socket_.bind(kZapEndpoint);
  } catch (const zmq::error_t& e) {
    throw Error(ErrorCode::kConflict,
                std::string("cannot bind the ZAP handler (") + kZapEndpoint + "): " + e.what());
  }
  if (sec) {
    peering_ = true;
    plain_ = sec->plain;
    for (const auto& k : sec->authorized) keys_.insert(z85_to_binary(k));
  }
}

void ZapHandler::refuse_log(const std::string& who, const std::string& what) {
  ++refused_;
  auto now = std::chrono::steady_clock::now();
  // A refused client reconnects every few hundred ms: one line a minute.
  if (refusals_.size() > 1024) refusals_.clear();
  auto [it, fresh] = refusals_.try_emplace(who + " " + what);
  if (!fresh && now - it->second.logged < kRefusalLogInterval) {
    ++it->second.unlogged;
    return;
  }
  std::string again =
      it->second.unlogged ? " (and " + std::to_string(it->second.unlogged) + " times since)" : "";
  it->second = {now, 0};
  log::warning("connection refused: " + who + " " + what + again);
}

ZapHandler::Verdict ZapHandler::decide_peer(const std::string& address,
                                            const std::string& mechanism,
                                            const std::vector<zmq::message_t>& req) {
  Verdict v;
  std::string who = "daemon at " + (address.empty() ? std::string("?") : address);
  if (!peering_) {
    refuse_log(who, "on a daemon that does not peer");
    return v;
  }
  if (plain_) {
    if (mechanism != "NULL") {
      refuse_log(who, "using " + mechanism + " where peering is plain TCP (peer_plain)");
      return v;
    }
  } else if (mechanism != "CURVE" || req.size() != 7 || req[6].size() != 32) {
    refuse_log(who, "using " + mechanism + " where peering needs CURVE");
    return v;
  } else if (!keys_.count(req[6].to_string())) {
    refuse_log(who, "with CURVE key " + binary_to_z85(req[6].to_string()) +
                        ", which is not in peer-authorized-keys");
    return v;
  } else {
    v.user = binary_to_z85(req[6].to_string());
  }
  if (policy_.peer) {
    if (std::string why = policy_.peer(address); !why.empty()) {
      refuse_log(who, why);
      v.user.clear();
      return v;
    }
  }
  v.code = "200";
  v.text = "OK";
  log::debug("peer admitted: " + who + (v.user.empty() ? "" : " with key " + v.user));
  return v;
}

ZapHandler::Verdict ZapHandler::decide_local(const std::string& address,
                                             const std::string& mechanism) {
  Verdict v;
  int64_t uid = -1, gid = -1, pid = 0;
  if (mechanism != "NULL" || !trust::parse_peer_address(address, uid, gid, pid)) {
    // libzmq gives every ipc connection its credentials; without them the
    // requests would be refused anyway (intake.cpp).
    refuse_log("local client '" + address + "'", "without credentials");
    return v;
  }
  if (policy_.local) {
    if (std::string why = policy_.local(uid); !why.empty()) {
      refuse_log(
          "local client of uid " + std::to_string(uid) + " (pid " + std::to_string(pid) + ")", why);
      return v;
    }
  }
  v.code = "200";
  v.text = "OK";
  return v;
}

void ZapHandler::handle_ready() {
  for (;;) {
    std::vector<zmq::message_t> req;
    auto got = zmq::recv_multipart(socket_, std::back_inserter(req), zmq::recv_flags::dontwait);
    if (!got) return;
    std::string id = req.size() > 1 ? req[1].to_string() : "";
    Verdict v;
    if (req.size() < 6 || req[0].to_string_view() != "1.0") {
      v.code = "500";
      v.text = "malformed ZAP request";
      log::warning("ZAP: malformed request with " + std::to_string(req.size()) + " frames");
    } else {
      std::string domain = req[2].to_string(), address = req[3].to_string();
      std::string mechanism = req[5].to_string();
      if (domain == kZapDomain)
        v = decide_peer(address, mechanism, req);
      else if (domain == kLocalZapDomain)
        v = decide_local(address, mechanism);
      else
        refuse_log("client at " + address, "in unknown ZAP domain '" + domain + "'");
    }
    if (v.code == "200") ++admitted_;
    std::vector<zmq::message_t> reply;
    reply.emplace_back(std::string_view("1.0"));
    reply.emplace_back(id);
    reply.emplace_back(v.code);
    reply.emplace_back(v.text);
    reply.emplace_back(v.user);
    reply.emplace_back();
    zmq::send_multipart(socket_, reply);
  }
}

}  // namespace muster::daemon::peer
