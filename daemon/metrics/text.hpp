// Prometheus's text exposition format, version 0.0.4: `# HELP` and `# TYPE`
// lines, then `name{label="value",...} number` samples. Label values escape
// backslash, double quote and newline; HELP text escapes backslash and
// newline; histograms are cumulative `_bucket{le="..."}` series ending at
// `+Inf`, then `_sum` and `_count`. Plain text in, plain text out: what the
// HTTP side serves is rendered here, on the loop's thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace muster::daemon::metrics {

// A histogram's counts over fixed upper bounds (the bounds live with the
// series that uses them); counts[i] holds observations <= bounds[i] and
// > bounds[i-1], counts[bounds.size()] the rest. Cheap to observe: no
// allocation, a scan of at most kMaxBounds bounds.
struct Histogram {
  static constexpr size_t kMaxBounds = 16;
  uint64_t counts[kMaxBounds + 1] = {};
  double sum = 0;
  uint64_t count = 0;
  void observe(std::span<const double> bounds, double v) {
    size_t i = 0;
    while (i < bounds.size() && v > bounds[i]) ++i;
    ++counts[i];
    sum += v;
    ++count;
  }
};

struct Label {
  std::string_view name;
  std::string_view value;
};

// A number as Prometheus reads it: integers without an exponent, +Inf,
// -Inf and NaN spelled its way.
std::string format_value(double v);
// A label value inside its double quotes.
std::string escape_label_value(std::string_view v);
// HELP text: backslash and newline escaped.
std::string escape_help(std::string_view v);

class TextWriter {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  // The HELP and TYPE lines of a family; its samples follow.
  void family(std::string_view name, Type type, std::string_view help);
  void sample(std::string_view name, std::initializer_list<Label> labels, double value);
  void sample(std::string_view name, std::span<const Label> labels, double value);
  // A family of one sample without labels.
  void single(std::string_view name, Type type, std::string_view help, double value);
  // name_bucket (cumulative, le = each bound then +Inf), name_sum, name_count.
  void histogram(std::string_view name, std::span<const Label> labels,
                 std::span<const double> bounds, const Histogram& h);
  const std::string& text() const { return out_; }
  std::string take() { return std::move(out_); }

 private:
  void labels(std::span<const Label> labels, const Label* extra);
  std::string out_;
};

}  // namespace muster::daemon::metrics
