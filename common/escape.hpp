// The one escape for user text that meets another reader: a terminal
// (`muster status`, `--watch`), a log line (stderr, the file sink, a journal
// field), a metrics label, a file another program parses. Like git's
// quote_c_style and systemd's cescape: what it returns is one line of
// printable text that cannot move a cursor, set a title, start a new line,
// field or entry, or reorder what follows it, and that still reads as the
// original where the original was harmless.
#pragma once

#include <string>
#include <string_view>

namespace muster {

// Printable ASCII and valid UTF-8 pass unchanged, except:
//  - backslash becomes "\\" (so that an escape is never forged by text);
//  - \a \b \t \n \v \f \r as in C, ESC as "\e", other C0 controls and DEL
//    as "\xHH";
//  - every byte of an invalid UTF-8 sequence (a stray continuation byte, a
//    truncated, overlong or surrogate sequence, a code point over U+10FFFF)
//    as "\xHH";
//  - C1 controls (U+0080-U+009F), the bidirectional formatting characters
//    (U+061C, U+200E, U+200F, U+202A-U+202E, U+2066-U+2069) and the line and
//    paragraph separators (U+2028, U+2029) as "\uHHHH".
std::string escape(std::string_view text);

// Whether escape(text) would return text unchanged.
bool escape_needed(std::string_view text);

}  // namespace muster
