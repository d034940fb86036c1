#include "cli/flag_parser.hpp"

#include <algorithm>
#include <set>

#include "edit_distance.hpp"

extern char** environ;

namespace muster::cli {

namespace {

std::string underscored(std::string s) {
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

// Every long spelling of f: each name with dashes and with underscores.
std::vector<std::string> spellings(const Flag& f) {
  std::vector<std::string> out;
  auto add = [&](const std::string& n) {
    for (const auto& s : {"--" + n, "--" + underscored(n)})
      if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  };
  add(f.name);
  for (const auto& a : f.aliases) add(a);
  return out;
}

// Help text wrapped to the terminal's usual 80 columns after a 30-column
// first column.
std::string wrapped(const std::string& text, size_t indent, size_t width) {
  std::string out, line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    std::string word = text.substr(start, end - start);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      out += line + "\n" + std::string(indent, ' ');
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
    start = end + 1;
  }
  return out + line;
}

}  // namespace

bool switch_value(const std::string& value) {
  if (value == "1" || value == "true" || value == "True") return true;
  if (value == "0" || value == "false" || value == "False" || value.empty()) return false;
  throw FlagError("takes 1 or 0, got '" + value + "'");
}

std::string FlagParser::env_name(const std::string& name) {
  std::string s = "PET_" + underscored(name);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::toupper(c); });
  return s;
}

const Flag& FlagParser::find_long(const std::string& name) const {
  std::vector<const Flag*> matches;
  std::vector<std::string> all, shown;
  for (const auto& f : flags_) {
    bool matched = false;
    for (const auto& s : spellings(f)) {
      if (s == name) return f;
      all.push_back(s);
      if (s.compare(0, name.size(), name) == 0 && !matched) {
        matched = true;
        matches.push_back(&f);
        shown.push_back(s);
      }
    }
  }
  // As argparse: a unique prefix names its flag (both spellings of one
  // flag are one flag).
  if (matches.size() == 1) return *matches[0];
  if (matches.size() > 1) {
    std::string list;
    for (const auto& s : shown) list += (list.empty() ? "" : ", ") + s;
    throw FlagError("ambiguous option: " + name + " could match " + list);
  }
  throw FlagError("unrecognized option '" + name + "'" + did_you_mean(name, all));
}

const Flag& FlagParser::find_short(char c) const {
  for (const auto& f : flags_)
    if (f.short_name == c) return f;
  throw FlagError(std::string("unrecognized option '-") + c + "'");
}

void FlagParser::apply(const Flag& f, const std::string& shown, const std::string& value) const {
  try {
    f.set(value);
  } catch (const std::exception& e) {
    throw FlagError("argument " + shown + ": " + e.what());
  }
}

size_t FlagParser::parse(const std::vector<std::string>& args,
                         const std::map<std::string, std::string>& env,
                         std::vector<std::string>* positionals) const {
  for (const auto& f : flags_) {
    if (f.name == "help") continue;
    std::vector<std::string> names{f.name};
    names.insert(names.end(), f.aliases.begin(), f.aliases.end());
    for (const auto& n : names)
      if (auto it = env.find(env_name(n)); it != env.end())
        apply(f, it->first + "=" + it->second, it->second);
  }
  size_t i = 0;
  // The value of a flag that takes one: after '=' or attached, else the
  // next word.
  auto value_of = [&](const std::string& shown, const std::string& attached, bool has_attached) {
    if (has_attached) return attached;
    if (i + 1 >= args.size()) throw FlagError("argument " + shown + ": expected one argument");
    return args[++i];
  };
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" && positionals) {
      positionals->insert(positionals->end(), args.begin() + i + 1, args.end());
      return args.size();
    }
    if (a == "--") return i + 1;
    if ((a.size() < 2 || a[0] != '-') && positionals) {
      positionals->push_back(a);
      continue;
    }
    if (a.size() < 2 || a[0] != '-') return i;
    if (a[1] == '-') {
      auto eq = a.find('=');
      const Flag& f = find_long(a.substr(0, eq));
      std::string shown = "--" + f.name;
      if (f.metavar.empty()) {
        if (eq != std::string::npos)
          throw FlagError("argument " + shown + ": ignored explicit argument '" + a.substr(eq + 1) +
                          "'");
        apply(f, shown, "1");
      } else {
        bool attached = eq != std::string::npos;
        apply(f, shown, value_of(shown, attached ? a.substr(eq + 1) : "", attached));
      }
      continue;
    }
    // One-letter flags: `-n 2`, `-n2`, `-n=2`, a cluster of switches `-mh`.
    for (size_t k = 1; k < a.size(); ++k) {
      const Flag& f = find_short(a[k]);
      std::string shown = std::string("-") + a[k];
      if (f.metavar.empty()) {
        apply(f, shown, "1");
        continue;
      }
      std::string rest = a.substr(k + 1);
      if (!rest.empty() && rest[0] == '=') rest.erase(0, 1);
      apply(f, shown, value_of(shown, rest, k + 1 < a.size()));
      break;
    }
  }
  return i;
}

std::string FlagParser::help() const {
  std::string out;
  for (const auto& f : flags_) {
    if (f.hidden) continue;
    std::string left = "  ";
    if (f.short_name) left += std::string("-") + f.short_name + ", ";
    left += "--" + f.name;
    if (!f.metavar.empty()) left += " " + f.metavar;
    std::string also;
    for (const auto& n : f.aliases) also += (also.empty() ? "--" : ", --") + n;
    std::string text = f.help + (also.empty() ? "" : " (also " + also + ")");
    if (left.size() >= 30)
      out += left + "\n" + std::string(30, ' ');
    else
      out += left + std::string(30 - left.size(), ' ');
    out += wrapped(text, 30, 50) + "\n";
  }
  return out;
}

std::string FlagParser::dump(const std::string& command) const {
  std::string out;
  for (const auto& f : flags_) {
    std::string names;
    for (const auto& s : spellings(f)) names += (names.empty() ? "" : ",") + s;
    out += "flag\t" + command + "\t" + names + "\t" +
           (f.short_name ? std::string(1, f.short_name) : "") + "\t" + f.metavar + "\t" + f.help +
           "\n";
  }
  return out;
}

std::string closest(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::string::npos;
  for (const auto& c : candidates) {
    size_t d = edit_distance(word, c);
    // Close: at most 40% of the longer word changed (difflib's 0.6 cutoff).
    if (d * 5 <= std::max(word.size(), c.size()) * 2 && d < best_d) {
      best = c;
      best_d = d;
    }
  }
  return best;
}

std::string did_you_mean(const std::string& word, const std::vector<std::string>& candidates) {
  std::string hint = closest(word, candidates);
  return hint.empty() ? "" : "; did you mean '" + hint + "'?";
}

std::map<std::string, std::string> environment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    auto eq = kv.find('=');
    if (eq != std::string::npos) env[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return env;
}

}  // namespace muster::cli
