// Where musterd's log lines go (common/log.hpp's sink), chosen once at
// start:
//   - MUSTER_LOG_SINK=journal: the journal, through sd_journal_sendv, with
//     the lines' fields (needs libsystemd);
//   - MUSTER_LOG_SINK=file:PATH: the same entries appended to PATH in the
//     journal's export format (FIELD=value lines, a blank line after each
//     entry), so that tests can read the fields on a machine without
//     journald;
//   - MUSTER_LOG_SINK=stderr, or unset while stderr is not the journal:
//     stderr, as before;
//   - unset, when stderr is the journal (JOURNAL_STREAM names stderr's
//     device and inode, systemd's convention) and libsystemd was found: the
//     journal.
#pragma once

#include <string>

namespace muster::daemon::systemd {

// Installs the sink; returns a sentence for the log ("" when stderr stays),
// or throws std::runtime_error for an unusable MUSTER_LOG_SINK.
std::string install_log_sink();

// True when JOURNAL_STREAM ("DEV:INO") names the file open on fd.
bool stream_is_journal(const char* journal_stream, int fd);

}  // namespace muster::daemon::systemd
