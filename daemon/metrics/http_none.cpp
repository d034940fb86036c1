// Exporter in a build without libmicrohttpd: --metrics-listen is refused
// by the option parser already; this says the same to an embedding caller.
#include "metrics/http.hpp"
#include "muster/error.hpp"

namespace muster::daemon::metrics {

struct Exporter::Daemon {};

Exporter::Exporter(const ListenAddress&) {
  throw Error(ErrorCode::kInvalidArgument,
              "--metrics-listen: musterd was built without metrics (libmicrohttpd; the meson "
              "feature 'metrics')");
}

Exporter::~Exporter() = default;

}  // namespace muster::daemon::metrics
