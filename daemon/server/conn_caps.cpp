#include "server/conn_caps.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include "log.hpp"
#include "server/accept_guard.hpp"

namespace muster::daemon {

namespace {

// One connection less of `key` (a uid, a peer's address).
template <class Counts, class Key>
void forget(Counts& counts, const Key& key) {
  if (auto it = counts.find(key); it != counts.end() && --it->second == 0) counts.erase(it);
}

// A closed fd no longer counts for whom it was counted (key_of_fd[fd]).
template <class KeyOfFd, class Counts>
void forget_fd(KeyOfFd& key_of_fd, Counts& counts, int fd) {
  auto it = key_of_fd.find(fd);
  if (it == key_of_fd.end()) return;
  forget(counts, it->second);
  key_of_fd.erase(it);
}

}  // namespace

std::string tcp_peer_address(int fd) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  char host[NI_MAXHOST] = {};
  if (::getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) != 0)
    return "";
  return host;
}

void ConnCaps::refuse(int fd, const std::string& why) {
  ::shutdown(fd, SHUT_RDWR);
  ++refused_;
  ++refused_unlogged_;
  last_refusal_ = why;
  say_refusals();
}

void ConnCaps::count_closed_at_accept() {
  const uint64_t now = accept_caps_refused();
  if (now == closed_at_accept_) return;
  refused_ += now - closed_at_accept_;
  refused_unlogged_ += now - closed_at_accept_;
  closed_at_accept_ = now;
  last_refusal_ = accept_caps_last_refusal();
  say_refusals();
}

void ConnCaps::say_refusals() {
  if (refused_unlogged_ == 0) return;
  auto now = Clock::now();
  if (now - refusal_logged_ < std::chrono::seconds(10)) return;
  refusal_logged_ = now;
  log::notice("shut " + std::to_string(refused_unlogged_) +
              " connection(s) at accept in the last 10 s, the last one " + last_refusal_);
  refused_unlogged_ = 0;
}

void ConnCaps::local_accepted(int fd) {
  // The fd is still the connection's: its DISCONNECTED event, which comes
  // after this ACCEPTED one, has not been read. -1: the kernel would not
  // say (counted together).
  ucred cred{};
  socklen_t len = sizeof cred;
  bool known = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0;
  int64_t uid = known ? cred.uid : -1;
  if (auto old = uid_of_fd_.find(fd); old != uid_of_fd_.end()) forget(per_uid_open_, old->second);
  uid_of_fd_[fd] = uid;
  uint64_t n = ++per_uid_open_[uid];
  // Counted until its DISCONNECTED. A client that handshakes at once is
  // refused by the ZAP handler, with the sentence libmuster shows; one
  // that does not is shut when its grace ends (sweep).
  if (per_uid_ != 0 && n > per_uid_) {
    silent_.erase(fd);
    doomed_[fd] = {Clock::now() + kGrace, uid, known ? cred.pid : -1, "",
                   "of uid " + std::to_string(uid) + ", over its cap (" + std::to_string(n - 1) +
                       " open; max-connections-per-uid " + std::to_string(per_uid_) + ")"};
    return;
  }
  if (max_silent_ == 0) return;
  silent_[fd] = {Clock::now(), uid, known ? cred.pid : -1};
  bound_silent();
}

void ConnCaps::bound_silent() {
  while (silent_.size() > max_silent_) {
    auto oldest = silent_.begin();
    for (auto it = silent_.begin(); it != silent_.end(); ++it)
      if (it->second.since < oldest->second.since) oldest = it;
    int fd = oldest->first;
    Silent who = oldest->second;
    silent_.erase(oldest);
    // Only while the fd is still that connection: its DISCONNECTED may be
    // on its way and the number reused.
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
        static_cast<int64_t>(cred.uid) == who.uid && cred.pid == who.pid)
      refuse(fd, "of uid " + std::to_string(who.uid) + ", the oldest of " +
                     std::to_string(max_silent_) +
                     " connections that sent nothing yet (in their handshake or silent)");
  }
}

void ConnCaps::local_closed(int fd) {
  accept_caps_closed(fd);
  silent_.erase(fd);
  doomed_.erase(fd);
  forget_fd(uid_of_fd_, per_uid_open_, fd);
}

void ConnCaps::peer_accepted(int fd, bool needs_auth) {
  peer_closed(fd);  // a lost DISCONNECTED: the fd is someone else's now
  std::string address = tcp_peer_address(fd);
  address_of_fd_[fd] = address;
  uint64_t n = ++per_address_open_[address];
  if (per_address_ != 0 && n > per_address_) {
    doomed_[fd] = {Clock::now() + kGrace, -1, -1, address,
                   "from " + address + ", over its cap (" + std::to_string(n - 1) +
                       " open; max-connections-per-peer " + std::to_string(per_address_) + ")"};
    return;
  }
  if (needs_auth) unauthenticated_[fd] = {Clock::now(), address};
}

void ConnCaps::peer_closed(int fd) {
  accept_caps_closed(fd);
  unauthenticated_.erase(fd);
  doomed_.erase(fd);
  forget_fd(address_of_fd_, per_address_open_, fd);
}

uint64_t ConnCaps::local_of(int64_t uid) const {
  auto it = per_uid_open_.find(uid);
  return it == per_uid_open_.end() ? 0 : it->second;
}

uint64_t ConnCaps::peers_of(const std::string& address) const {
  auto it = per_address_open_.find(address);
  return it == per_address_open_.end() ? 0 : it->second;
}

std::string ConnCaps::admit_local(int64_t uid) const {
  uint64_t n = local_of(uid);
  if (per_uid_ == 0 || n <= per_uid_) return "";
  return "over its cap: uid " + std::to_string(uid) + " has " + std::to_string(n - 1) +
         " connections open, the most musterd allows one user (max-connections-per-uid " +
         std::to_string(per_uid_) + ")";
}

std::string ConnCaps::admit_peer(const std::string& address) const {
  uint64_t n = peers_of(address);
  if (per_address_ == 0 || n <= per_address_) return "";
  return "over its cap: " + std::to_string(n - 1) +
         " connections from this address are open, the most musterd allows one host "
         "(max-connections-per-peer " +
         std::to_string(per_address_) + ")";
}

void ConnCaps::sweep_doomed(Clock::time_point now) {
  for (auto it = doomed_.begin(); it != doomed_.end();) {
    const Doomed& d = it->second;
    if (now < d.deadline) {
      ++it;
      continue;
    }
    // Only while the fd is still that connection (its DISCONNECTED may be
    // on its way, and the number reused).
    bool same;
    if (d.address.empty()) {
      ucred cred{};
      socklen_t len = sizeof cred;
      same = ::getsockopt(it->first, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 &&
             static_cast<int64_t>(cred.uid) == d.uid && cred.pid == d.pid;
    } else {
      same = tcp_peer_address(it->first) == d.address;
    }
    // And only while its owner is still over the cap: counted over it at
    // accept because another connection's DISCONNECTED was not read yet, a
    // connection the ZAP handler then admitted within the cap is the
    // user's, and shutting it would take the user below the cap (one test
    // run lost its one allowed connection so, and the next was served).
    bool over = d.address.empty() ? local_of(d.uid) > per_uid_ : peers_of(d.address) > per_address_;
    if (same && over) refuse(it->first, d.why);
    it = doomed_.erase(it);
  }
}

size_t ConnCaps::sweep(Clock::time_point now) {
  count_closed_at_accept();
  sweep_doomed(now);
  size_t closed = 0;
  for (auto it = unauthenticated_.begin(); it != unauthenticated_.end();) {
    if (now - it->second.since < auth_within_) {
      ++it;
      continue;
    }
    // Only while the fd is still that connection (the same peer address):
    // its DISCONNECTED may be on its way, and the number reused.
    if (tcp_peer_address(it->first) == it->second.address) {
      ::shutdown(it->first, SHUT_RDWR);
      ++closed;
    }
    it = unauthenticated_.erase(it);
  }
  return closed;
}

std::optional<ConnCaps::Clock::time_point> ConnCaps::next_sweep() const {
  std::optional<Clock::time_point> next;
  for (const auto& [fd, d] : doomed_)
    if (!next || d.deadline < *next) next = d.deadline;
  for (const auto& [fd, u] : unauthenticated_)
    if (!next || u.since + auth_within_ < *next) next = u.since + auth_within_;
  return next;
}

}  // namespace muster::daemon
