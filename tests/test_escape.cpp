// common/escape.hpp: the one escape for user text that another reader sees.
#include <catch2/catch.hpp>

#include <string>

#include "escape.hpp"

using muster::escape;
using muster::escape_needed;

TEST_CASE("plain text and valid UTF-8 pass unchanged") {
  for (const std::string s : {"", "train42", "job-1_a.b:c@d+e", "key with spaces ~!#$%^&*()",
                              "Grüße, 日本語, emoji \xf0\x9f\x98\x80"}) {
    INFO(s);
    CHECK(escape(s) == s);
    CHECK(!escape_needed(s));
  }
}

TEST_CASE("C0 controls, DEL and backslash are escaped C-style") {
  CHECK(escape("a\\b") == "a\\\\b");
  CHECK(escape("\a\b\t\n\v\f\r") == "\\a\\b\\t\\n\\v\\f\\r");
  CHECK(escape(std::string("nul\0byte", 8)) == "nul\\x00byte");
  CHECK(escape("\x01\x1f\x7f") == "\\x01\\x1f\\x7f");
  CHECK(escape_needed("x\ny"));
  CHECK(escape_needed("x\\y"));
}

TEST_CASE("ESC sequences cannot reach a terminal: title, clear screen, cursor moves") {
  // What an attacker's barrier name did to root's `muster status`.
  std::string title = "\x1b]0;pwned\x07";
  std::string clear = "\x1b[2J\x1b[H";
  std::string fake = "\r\x1b[Kmusterd OK";
  CHECK(escape(title) == "\\e]0;pwned\\a");
  CHECK(escape(clear) == "\\e[2J\\e[H");
  CHECK(escape(fake) == "\\r\\e[Kmusterd OK");
  for (const auto& s : {title, clear, fake}) CHECK(escape(s).find('\x1b') == std::string::npos);
}

TEST_CASE("C1 controls (8-bit CSI) are escaped, as bytes and as UTF-8") {
  CHECK(escape("\x9b"
               "2J") == "\\x9b2J");  // a raw C1 byte is invalid UTF-8
  CHECK(escape("\xc2\x9b"
               "2J") == "\\u009B2J");       // U+009B CSI, valid UTF-8
  CHECK(escape("\xc2\x85") == "\\u0085");   // NEL
  CHECK(escape("\xc2\xa0") == "\xc2\xa0");  // U+00A0 is printable
}

TEST_CASE("invalid UTF-8 is escaped byte by byte") {
  CHECK(escape("\xff") == "\\xff");
  CHECK(escape("\x80") == "\\x80");                             // stray continuation byte
  CHECK(escape("a\xc3") == "a\\xc3");                           // truncated at the end
  CHECK(escape("\xc3(") == "\\xc3(");                           // bad continuation
  CHECK(escape("\xc0\xaf") == "\\xc0\\xaf");                    // overlong '/'
  CHECK(escape("\xe0\x80\xaf") == "\\xe0\\x80\\xaf");           // overlong, 3 bytes
  CHECK(escape("\xed\xa0\x80") == "\\xed\\xa0\\x80");           // a UTF-16 surrogate
  CHECK(escape("\xf4\x90\x80\x80") == "\\xf4\\x90\\x80\\x80");  // over U+10FFFF
}

TEST_CASE("bidi overrides and line separators are escaped") {
  CHECK(escape("abc\xe2\x80\xae"
               "fdp.exe") == "abc\\u202Efdp.exe");  // RLO
  CHECK(escape("\xe2\x80\xaa\xe2\x80\xab\xe2\x80\xac\xe2\x80\xad") ==
        "\\u202A\\u202B\\u202C\\u202D");
  CHECK(escape("\xe2\x81\xa6\xe2\x81\xa7\xe2\x81\xa8\xe2\x81\xa9") ==
        "\\u2066\\u2067\\u2068\\u2069");
  CHECK(escape("\xe2\x80\x8e\xe2\x80\x8f\xd8\x9c") == "\\u200E\\u200F\\u061C");
  CHECK(escape("one\xe2\x80\xa8two\xe2\x80\xa9") == "one\\u2028two\\u2029");
}

TEST_CASE("an escaped text is one line of printable text, whatever the input") {
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
  auto out = escape(all + all);
  for (unsigned char c : out) {
    CHECK(c != '\n');
    CHECK(c != '\r');
    CHECK(c != 0x1b);
    CHECK((c >= 0x20 && c != 0x7f));
  }
  // Escaping is not its own undoing: a forged escape stays visible as text.
  CHECK(escape("\\e[2J") == "\\\\e[2J");
}
