// Whose a process is, as the kernel says: the four uids of its
// /proc/PID/status Uid: line (real, effective, saved, filesystem).
#pragma once

#include <cstdint>
#include <optional>

namespace muster::daemon {

// The uid of a live process whose real, effective, saved and filesystem
// uids are one and the same; nullopt when they differ (a setuid program, a
// root process running as another user for a while), or when there is no
// such process (or it is hidden from the daemon, e.g. by hidepid).
std::optional<int64_t> sole_uid(int64_t pid);

}  // namespace muster::daemon
