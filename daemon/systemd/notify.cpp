#include "systemd/notify.hpp"

#include <cstdlib>

#include "muster_config.h"

#if HAVE_SYSTEMD
#include <systemd/sd-daemon.h>
#endif

namespace muster::daemon::systemd {

#if HAVE_SYSTEMD
void notify_ready() {
  sd_notify(0, "READY=1");
}
void notify_status(const std::string& status) {
  sd_notify(0, ("STATUS=" + status).c_str());
}
void notify_stopping() {
  sd_notify(0, "STOPPING=1");
}
bool notify_enabled() {
  const char* s = std::getenv("NOTIFY_SOCKET");
  return s && *s;
}
std::chrono::microseconds watchdog_interval() {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0) return std::chrono::microseconds(0);
  return std::chrono::microseconds(usec);
}
void notify_watchdog() {
  sd_notify(0, "WATCHDOG=1");
}
#else
void notify_ready() {}
void notify_status(const std::string&) {}
void notify_stopping() {}
bool notify_enabled() {
  return false;
}
std::chrono::microseconds watchdog_interval() {
  return std::chrono::microseconds(0);
}
void notify_watchdog() {}
#endif

}  // namespace muster::daemon::systemd
