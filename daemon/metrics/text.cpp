#include "metrics/text.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "escape.hpp"

namespace muster::daemon::metrics {

std::string format_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[32];
  // Counts up to 2^53 print exactly, as integers.
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else  // the shortest text that reads back as v: 0.005, not 0.0050000000000000001
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  return buf;
}

namespace {

// The exposition format's escapes: backslash and newline everywhere, the
// double quote only inside a label value (HELP text is not quoted).
std::string escape_text(std::string_view v, bool quote) {
  std::string s;
  s.reserve(v.size());
  for (char c : v) {
    if (c == '\\')
      s += "\\\\";
    else if (c == '"' && quote)
      s += "\\\"";
    else if (c == '\n')
      s += "\\n";
    else
      s += c;
  }
  return s;
}

}  // namespace

std::string escape_label_value(std::string_view v) {
  return escape_text(v, true);
}

std::string escape_help(std::string_view v) {
  return escape_text(v, false);
}

void TextWriter::family(std::string_view name, Type type, std::string_view help) {
  static constexpr const char* kTypes[] = {"counter", "gauge", "histogram"};
  out_.append("# HELP ").append(name).append(" ").append(escape_help(help)).append("\n");
  out_.append("# TYPE ").append(name).append(" ");
  out_.append(kTypes[static_cast<int>(type)]).append("\n");
}

void TextWriter::single(std::string_view name, Type type, std::string_view help, double value) {
  family(name, type, help);
  sample(name, {}, value);
}

void TextWriter::labels(std::span<const Label> ls, const Label* extra) {
  if (ls.empty() && !extra) return;
  out_ += '{';
  bool first = true;
  auto one = [&](const Label& l) {
    if (!first) out_ += ',';
    first = false;
    out_.append(l.name).append("=\"").append(escape_label_value(escape(l.value))).append("\"");
  };
  for (const auto& l : ls) one(l);
  if (extra) one(*extra);
  out_ += '}';
}

void TextWriter::sample(std::string_view name, std::initializer_list<Label> ls, double value) {
  sample(name, std::span<const Label>(ls.begin(), ls.size()), value);
}

void TextWriter::sample(std::string_view name, std::span<const Label> ls, double value) {
  out_.append(name);
  labels(ls, nullptr);
  out_.append(" ").append(format_value(value)).append("\n");
}

void TextWriter::histogram(std::string_view name, std::span<const Label> ls,
                           std::span<const double> bounds, const Histogram& h) {
  std::string bucket = std::string(name) + "_bucket";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds.size() && i <= Histogram::kMaxBounds; ++i) {
    cumulative += h.counts[i];
    std::string le = i < bounds.size() ? format_value(bounds[i]) : "+Inf";
    Label l{"le", le};
    out_.append(bucket);
    labels(ls, &l);
    out_.append(" ").append(format_value(static_cast<double>(cumulative))).append("\n");
  }
  sample(std::string(name) + "_sum", ls, h.sum);
  sample(std::string(name) + "_count", ls, static_cast<double>(h.count));
}

}  // namespace muster::daemon::metrics
