// Exporter over libmicrohttpd (built when the `metrics` feature found it).
#include <microhttpd.h>

#include <cstring>

#include "metrics/http.hpp"
#include "muster/error.hpp"

namespace muster::daemon::metrics {

struct Exporter::Daemon {
  MHD_Daemon* mhd = nullptr;
  ~Daemon() {
    if (mhd) MHD_stop_daemon(mhd);
  }
};

namespace {

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

}  // namespace

Exporter::Exporter(const ListenAddress& where) : d_(std::make_unique<Daemon>()) {
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG;
  if (where.ipv6) flags |= MHD_USE_IPv6;
  uint16_t want = ntohs(where.ipv6 ? reinterpret_cast<const sockaddr_in6*>(&where.addr)->sin6_port
                                   : reinterpret_cast<const sockaddr_in*>(&where.addr)->sin_port);
  d_->mhd = MHD_start_daemon(flags, want, nullptr, nullptr, &serve, this, MHD_OPTION_SOCK_ADDR,
                             &where.addr, MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
                             MHD_OPTION_CONNECTION_TIMEOUT, kConnectionTimeoutS,
                             MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(64 * 1024),
                             MHD_OPTION_END);
  if (!d_->mhd)
    throw Error(ErrorCode::kInternal,
                "cannot serve metrics on the --metrics-listen address (in use, or not this "
                "host's?)");
  const MHD_DaemonInfo* info = MHD_get_daemon_info(d_->mhd, MHD_DAEMON_INFO_BIND_PORT);
  port_ = info ? info->port : want;
}

// The HTTP thread ends before the snapshot it reads is destroyed.
Exporter::~Exporter() {
  d_.reset();
}

}  // namespace muster::daemon::metrics
