// The series every Prometheus client library exports about its process
// (process_cpu_seconds_total, process_resident_memory_bytes, ...), read from
// /proc/self, and muster_build_info: what dashboards built for any exporter
// expect to find.
#pragma once

#include "metrics/text.hpp"

namespace muster::daemon::metrics {

void process_families(TextWriter& w);

}  // namespace muster::daemon::metrics
