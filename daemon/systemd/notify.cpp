#include "systemd/notify.hpp"

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
#else
void notify_ready() {}
void notify_status(const std::string&) {}
void notify_stopping() {}
#endif

}  // namespace muster::daemon::systemd
