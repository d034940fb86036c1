// sd_notify where libsystemd was found, nothing otherwise (see MPD's
// src/lib/systemd). Kept here so no other file knows about libsystemd.
#pragma once

#include <chrono>
#include <string>

namespace muster::daemon::systemd {

void notify_ready();
void notify_status(const std::string& status);
void notify_stopping();

// True when a service manager listens (NOTIFY_SOCKET is set and libsystemd
// was found): only then is a STATUS= line worth computing.
bool notify_enabled();

// The unit's WatchdogSec for this process (sd_watchdog_enabled, which also
// checks WATCHDOG_PID), or zero when the unit sets none.
std::chrono::microseconds watchdog_interval();
// Sends WATCHDOG=1.
void notify_watchdog();

}  // namespace muster::daemon::systemd
