// Exporter over libmicrohttpd (built when the `metrics` feature found it).
#include <arpa/inet.h>
#include <microhttpd.h>
#include <sys/socket.h>

#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "escape.hpp"
#include "log_limit.hpp"
#include "metrics/http.hpp"
#include "muster/error.hpp"

namespace muster::daemon::metrics {

namespace {
using SteadyClock = std::chrono::steady_clock;
}

// Which connections are open, since when their request began, and whether
// its headers came: what the deadline and the evictions act on. Filled by
// libmicrohttpd's callbacks on its thread, read by the watchdog's; an fd is
// shut down only while its connection is in the table (libmicrohttpd tells
// CLOSED before it closes the fd), under the mutex.
struct Exporter::Daemon {
  struct Conn {
    int fd = -1;
    std::string address;
    SteadyClock::time_point since;
    bool headers = false;  // the request's head came: no longer "incomplete"
  };
  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::map<MHD_Connection*, Conn> conns;
  std::thread watchdog;
  MHD_Daemon* mhd = nullptr;
  ~Daemon() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    cv.notify_all();
    if (watchdog.joinable()) watchdog.join();
    if (mhd) MHD_stop_daemon(mhd);
  }

  // Shuts the oldest incomplete connection (of `address`, or of all when
  // empty); false when none is incomplete. Under mu.
  bool evict_oldest(const std::string& address) {
    Conn* oldest = nullptr;
    for (auto& [c, k] : conns)
      if (!k.headers && k.fd >= 0 && (address.empty() || k.address == address) &&
          (!oldest || k.since < oldest->since))
        oldest = &k;
    if (!oldest) return false;
    ::shutdown(oldest->fd, SHUT_RDWR);
    oldest->fd = -1;  // shut once; it leaves the table when libmicrohttpd closes it
    return true;
  }
  size_t count(const std::string& address) const {
    size_t n = 0;
    for (const auto& [c, k] : conns) n += k.fd >= 0 && (address.empty() || k.address == address);
    return n;
  }
  // Every request ends within kRequestDeadline of its first byte, however
  // slowly its bytes come (an idle timeout restarts with each one).
  void watch() {
    std::unique_lock lock(mu);
    while (!stopping) {
      cv.wait_for(lock, std::chrono::milliseconds(250));
      auto now = SteadyClock::now();
      for (auto& [c, k] : conns)
        if (k.fd >= 0 && now - k.since > kRequestDeadline) {
          ::shutdown(k.fd, SHUT_RDWR);
          k.fd = -1;
        }
    }
  }
};

namespace {

std::string address_of(const sockaddr* a) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (!a) return "";
  if (a->sa_family == AF_INET)
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a)->sin_addr, buf, sizeof buf);
  else if (a->sa_family == AF_INET6)
    ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr, buf, sizeof buf);
  return buf;
}

// A new connection: room is made for it by evicting the oldest request
// still incomplete, of its address when that address is at its limit, else
// of all when the table is full (local users can bind all of 127.0.0.0/8:
// a per-address limit alone does not keep a slot for the scraper).
MHD_Result admit(void* cls, const sockaddr* addr, socklen_t) {
  auto* d = static_cast<Exporter::Daemon*>(cls);
  std::lock_guard lock(d->mu);
  std::string address = address_of(addr);
  if (d->count(address) >= Exporter::kMaxPerAddress && !d->evict_oldest(address)) return MHD_NO;
  if (d->count("") >= Exporter::kMaxConnections && !d->evict_oldest("")) return MHD_NO;
  return MHD_YES;
}

void notify_connection(void* cls, MHD_Connection* c, void**, MHD_ConnectionNotificationCode code) {
  auto* d = static_cast<Exporter::Daemon*>(cls);
  std::lock_guard lock(d->mu);
  if (code == MHD_CONNECTION_NOTIFY_CLOSED) {
    d->conns.erase(c);
    return;
  }
  Exporter::Daemon::Conn k;
  k.since = SteadyClock::now();
  if (const auto* i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD))
    k.fd = i->connect_fd;
  if (const auto* i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS))
    k.address = address_of(i->client_addr);
  d->conns[c] = std::move(k);
}

// A request answered: the next one on the connection (keep-alive) starts
// its own deadline, incomplete until its head comes.
void request_done(void* cls, MHD_Connection* c, void**, MHD_RequestTerminationCode) {
  auto* d = static_cast<Exporter::Daemon*>(cls);
  std::lock_guard lock(d->mu);
  if (auto it = d->conns.find(c); it != d->conns.end()) {
    it->second.since = SteadyClock::now();
    it->second.headers = false;
  }
}

MHD_Result answer(MHD_Connection* c, unsigned status, const std::string& body, const char* type) {
  MHD_Response* r = MHD_create_response_from_buffer(body.size(), const_cast<char*>(body.data()),
                                                    MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  MHD_Result ok = MHD_queue_response(c, status, r);
  MHD_destroy_response(r);
  return ok;
}

MHD_Result serve(void* cls, MHD_Connection* c, const char* url, const char* method, const char*,
                 const char*, size_t* upload_size, void**) {
  const auto* self = static_cast<const Exporter*>(cls);
  self->headers_came(c);
  constexpr const char* kText = "text/plain; charset=utf-8";
  if (std::strcmp(method, "GET") != 0 && std::strcmp(method, "HEAD") != 0)
    return answer(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD\n", kText);
  if (*upload_size != 0) return MHD_NO;  // a GET with a body: closed
  std::shared_ptr<const Published> p = self->current();
  if (std::strcmp(url, "/metrics") == 0) {
    if (!p) return answer(c, MHD_HTTP_SERVICE_UNAVAILABLE, "no metrics published yet\n", kText);
    return answer(c, MHD_HTTP_OK, p->text, "text/plain; version=0.0.4; charset=utf-8");
  }
  if (std::strcmp(url, "/healthz") == 0) {
    std::string why = Exporter::health(p.get(), std::chrono::steady_clock::now());
    if (why.empty()) return answer(c, MHD_HTTP_OK, "ok\n", kText);
    return answer(c, MHD_HTTP_SERVICE_UNAVAILABLE, why + "\n", kText);
  }
  return answer(c, MHD_HTTP_NOT_FOUND, "not found: /metrics and /healthz only\n", kText);
}

// libmicrohttpd's own lines (a header too big, a connection that ended
// early) come at a network client's will, on libmicrohttpd's thread: 200
// requests with 1 MB headers wrote 30 of them, past musterd's rate limit.
// At most one per 10 s here, with a count of those left out, escaped (they
// may quote the request).
void mhd_log(void*, const char* format, va_list args) {
  static std::mutex mu;
  static std::chrono::steady_clock::time_point last{};
  static uint64_t left_out = 0;
  char text[512];
  std::vsnprintf(text, sizeof text, format, args);
  std::lock_guard lock(mu);
  const auto now = std::chrono::steady_clock::now();
  if (last != std::chrono::steady_clock::time_point{} && now - last < std::chrono::seconds(10)) {
    ++left_out;
    return;
  }
  last = now;
  std::string line = text;
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  log::write_unlimited(
      log::Level::kNotice,
      "metrics endpoint: " + escape(line) +
          (left_out ? " (" + std::to_string(left_out) + " line(s) of it left out before this one)"
                    : ""));
  left_out = 0;
}

}  // namespace

Exporter::Exporter(const ListenAddress& where) : d_(std::make_unique<Daemon>()) {
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
  if (where.ipv6) flags |= MHD_USE_IPv6;
  uint16_t want = ntohs(where.ipv6 ? reinterpret_cast<const sockaddr_in6*>(&where.addr)->sin6_port
                                   : reinterpret_cast<const sockaddr_in*>(&where.addr)->sin_port);
  // libmicrohttpd's own limit is past ours: an evicted connection holds
  // its slot until the thread sees it shut.
  // The logger first: libmicrohttpd uses its own for what comes before it.
  d_->mhd = MHD_start_daemon(
      flags, want, &admit, d_.get(), &serve, this, MHD_OPTION_EXTERNAL_LOGGER, &mhd_log, nullptr,
      MHD_OPTION_SOCK_ADDR, &where.addr, MHD_OPTION_CONNECTION_LIMIT, 2 * kMaxConnections,
      MHD_OPTION_CONNECTION_TIMEOUT, kConnectionTimeoutS, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      static_cast<size_t>(64 * 1024), MHD_OPTION_NOTIFY_CONNECTION, &notify_connection, d_.get(),
      MHD_OPTION_NOTIFY_COMPLETED, &request_done, d_.get(), MHD_OPTION_END);
  if (!d_->mhd)
    throw Error(ErrorCode::kInternal,
                "cannot serve metrics on the --metrics-listen address (in use, or not this "
                "host's?)");
  const MHD_DaemonInfo* info = MHD_get_daemon_info(d_->mhd, MHD_DAEMON_INFO_BIND_PORT);
  port_ = info ? info->port : want;
  d_->watchdog = std::thread([d = d_.get()] { d->watch(); });
}

void Exporter::headers_came(MHD_Connection* c) const {
  std::lock_guard lock(d_->mu);
  if (auto it = d_->conns.find(c); it != d_->conns.end()) it->second.headers = true;
}

// The HTTP thread ends before the snapshot it reads is destroyed.
Exporter::~Exporter() {
  d_.reset();
}

}  // namespace muster::daemon::metrics
