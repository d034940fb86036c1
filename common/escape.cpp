#include "escape.hpp"

#include <cstdint>
#include <cstdio>

namespace muster {

namespace {

// The length of the valid UTF-8 sequence at s[i] and its code point, or 0
// when it is not one (RFC 3629: no overlongs, no surrogates, <= U+10FFFF).
size_t utf8_at(std::string_view s, size_t i, uint32_t& cp) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  unsigned char c = b(0);
  size_t n;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((b(k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(k) & 0x3f);
  }
  if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
  if (cp >= 0xd800 && cp <= 0xdfff) return 0;
  return n;
}

// Code points that are valid but must not reach a reader as they are.
bool hidden_code_point(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9f) ||      // C1 controls (CSI is U+009B)
         cp == 0x061c ||                    // Arabic letter mark
         cp == 0x200e || cp == 0x200f ||    // LRM, RLM
         (cp >= 0x202a && cp <= 0x202e) ||  // LRE RLE PDF LRO RLO
         (cp >= 0x2066 && cp <= 0x2069) ||  // LRI RLI FSI PDI
         cp == 0x2028 || cp == 0x2029;      // line/paragraph separator
}

void hex_byte(std::string& out, unsigned char c) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "\\x%02x", c);
  out += buf;
}

template <bool kWrite>
bool walk(std::string_view s, std::string* out) {
  bool changed = false;
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      if constexpr (kWrite) out->push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c >= 0x80) {
      uint32_t cp = 0;
      size_t n = utf8_at(s, i, cp);
      if (n > 0 && !hidden_code_point(cp)) {
        if constexpr (kWrite) out->append(s.substr(i, n));
        i += n;
        continue;
      }
      changed = true;
      if constexpr (kWrite) {
        if (n > 0) {
          char buf[12];
          std::snprintf(buf, sizeof buf, "\\u%04X", static_cast<unsigned>(cp));
          *out += buf;
        } else {
          hex_byte(*out, c);
        }
      } else {
        return true;
      }
      i += n > 0 ? n : 1;
      continue;
    }
    changed = true;
    if constexpr (!kWrite) return true;
    switch (c) {
      case '\\':
        *out += "\\\\";
        break;
      case '\a':
        *out += "\\a";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\v':
        *out += "\\v";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\r':
        *out += "\\r";
        break;
      case 0x1b:
        *out += "\\e";
        break;
      default:
        hex_byte(*out, c);
    }
    ++i;
  }
  return changed;
}

}  // namespace

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  walk<true>(text, &out);
  return out;
}

bool escape_needed(std::string_view text) {
  return walk<false>(text, nullptr);
}

}  // namespace muster
