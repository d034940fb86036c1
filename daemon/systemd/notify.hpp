// sd_notify where libsystemd was found, nothing otherwise (see MPD's
// src/lib/systemd). Kept here so no other file knows about libsystemd.
#pragma once

#include <string>

namespace muster::daemon::systemd {

void notify_ready();
void notify_status(const std::string& status);
void notify_stopping();

}  // namespace muster::daemon::systemd
