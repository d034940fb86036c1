#include "options.hpp"

#include <grp.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "device_list.hpp"
#include "endpoint.hpp"
#include "log.hpp"
#include "muster_config.h"

namespace po = boost::program_options;

namespace muster::daemon {

namespace {

// Everything a setting can write; one instance for the real options, a
// scratch one to check each config file line on its own.
struct Settings {
  Options o;
  std::string devices;
  std::string socket_group;
};

po::options_description settings_description(Settings& s) {
  po::options_description d("daemon settings (command line or config file)");
  // clang-format off
  d.add_options()
    ("runtime-dir", po::value(&s.o.config.runtime_dir)->value_name("DIR")->default_value(default_runtime_dir()),
       "directory for musterd.sock and musterd.lock (default: /run/muster for root, else "
       "$XDG_RUNTIME_DIR/muster, else /tmp/muster-$UID)")
    ("state-dir", po::value(&s.o.config.state_dir)->value_name("DIR"),
       "directory for state.msgpack, the jobs, leases and stores a restarted daemon takes "
       "over (default: the runtime directory)")
    ("devices", po::value(&s.devices)->value_name("LIST"), "GPU indices this daemon may hand out, e.g. 0,1,4,6 (default: all)")
    ("simulate-gpus", po::value(&s.o.config.simulate_gpus)->value_name("N")->default_value(-1),
       "pretend N GPUs exist instead of asking NVML/CUDA (tests, demos); -1 = off")
    ("socket-group", po::value(&s.socket_group)->value_name("NAME"),
       "give the socket to group NAME (mode 0660) so its members may use the daemon "
       "(default: the daemon's own group)")
    ("log-level", po::value(&s.o.log_level)->value_name("LEVEL")->default_value("info"),
       "error, warning, notice, info or debug");
  // clang-format on
  return d;
}

int64_t group_id(const std::string& name) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos)
    return std::stoll(name);
  std::vector<char> buf(16384);
  struct group g {};
  struct group* found = nullptr;
  int err = ::getgrnam_r(name.c_str(), &g, buf.data(), buf.size(), &found);
  if (err != 0 || !found) throw std::runtime_error("--socket-group: no group named '" + name + "'");
  return found->gr_gid;
}

// The checks Boost cannot do; messages name the option.
void finish(Settings& s) {
  auto& c = s.o.config;
  if (!s.devices.empty()) {
    c.devices = parse_device_list(s.devices);
    c.devices_given = true;
  }
  if (c.simulate_gpus < -1 || c.simulate_gpus > 4096)
    throw std::runtime_error("--simulate-gpus must be between -1 and 4096");
  log::Level lvl;
  if (!log::parse_level(s.o.log_level, lvl))
    throw std::runtime_error("unknown --log-level '" + s.o.log_level + "'");
  if (c.runtime_dir.empty() || c.runtime_dir[0] != '/')
    throw std::runtime_error("--runtime-dir must be an absolute path");
  if (!c.state_dir.empty() && c.state_dir[0] != '/')
    throw std::runtime_error("--state-dir must be an absolute path");
  c.socket_gid = s.socket_group.empty() ? -1 : group_id(s.socket_group);
}

std::string trim(const std::string& s) {
  auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

// Checks each `name = value` line on its own (Boost's errors carry no line
// numbers) and returns the file's text, fit for po::parse_config_file.
std::string read_config(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("cannot read config file '" + file + "'");
  std::string line, good;
  std::map<std::string, int> seen;
  for (int n = 1; std::getline(in, line); ++n) {
    std::string where = "config file " + file + ", line " + std::to_string(n) + ": ";
    std::string text = trim(line.substr(0, line.find('#')));
    if (text.empty()) continue;
    if (text.front() == '[')
      throw std::runtime_error(where + "sections such as '" + text + "' are not supported");
    auto eq = text.find('=');
    if (eq == std::string::npos)
      throw std::runtime_error(where + "expected 'name = value', got '" + text + "'");
    std::string key = trim(text.substr(0, eq)), value = trim(text.substr(eq + 1));
    Settings scratch;
    auto desc = settings_description(scratch);
    if (key.empty()) throw std::runtime_error(where + "no option name before '='");
    if (!desc.find_nothrow(key, false))
      throw std::runtime_error(where + "unknown option '" + key + "'");
    if (auto [it, fresh] = seen.emplace(key, n); !fresh)
      throw std::runtime_error(where + "option '" + key + "' is already set on line " +
                               std::to_string(it->second));
    try {
      std::istringstream one(key + "=" + value);
      po::variables_map vm;
      po::store(po::parse_config_file(one, desc, false), vm);
      po::notify(vm);
      finish(scratch);
    } catch (const std::exception& e) {
      throw std::runtime_error(where + "bad value '" + value + "' for option '" + key +
                               "': " + e.what());
    }
    good += key + "=" + value + "\n";
  }
  if (in.bad()) throw std::runtime_error("cannot read config file '" + file + "'");
  return good;
}

}  // namespace

std::optional<Options> parse_options(int argc, char** argv) {
  Settings s;
  po::options_description cli("musterd options");
  // clang-format off
  cli.add_options()
    ("help,h", "print this help and exit")
    ("version", "print the version and exit")
    ("config", po::value<std::string>()->value_name("FILE"),
       "read settings from FILE ('name = value' a line, the names below; '#' starts a comment); "
       "'' reads none (default: /etc/muster/musterd.conf when it exists)")
    ("no-config", "read no config file")
    ("check-config", "check the command line and the config file, say so, exit 0 (2 when bad)");
  // clang-format on
  auto common = settings_description(s);
  po::options_description all;
  all.add(cli).add(common);
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, all), vm);
    if (vm.count("help")) {
      std::cout << "musterd " MUSTER_VERSION
                   " - node-local daemon for GPU leases, ranks and job stores\n\n"
                << "Usage: musterd [OPTIONS]\n\n"
                << all
                << "\nCommand-line settings win over the config file's. Bad options and bad "
                   "config lines exit with code 2 before anything is bound.\n"
                   "Clients find the daemon through MUSTER_ENDPOINT, else MUSTER_RUNTIME_DIR, "
                   "else the default runtime directory.\n";
      return std::nullopt;
    }
    if (vm.count("version")) {
      std::cout << "musterd " MUSTER_VERSION "\n";
      return std::nullopt;
    }
    if (vm.count("no-config") && vm.count("config") && !vm["config"].as<std::string>().empty())
      throw std::runtime_error("--config and --no-config contradict each other");
    std::string file;
    if (vm.count("config"))
      file = vm["config"].as<std::string>();
    else if (!vm.count("no-config") && ::access(kDefaultConfigFile, F_OK) == 0)
      file = kDefaultConfigFile;
    if (!file.empty()) {
      std::istringstream checked(read_config(file));
      po::store(po::parse_config_file(checked, common, false), vm);
    }
    po::notify(vm);
    s.o.config_file = file;
  } catch (const po::error& e) {
    throw std::runtime_error(e.what());
  }
  finish(s);
  if (vm.count("check-config")) {
    s.o.check_only = true;
    s.o.check_summary = s.o.config_file.empty()
                            ? "configuration OK (no config file, the command line only)"
                            : "configuration OK (" + s.o.config_file + " and the command line)";
  }
  return s.o;
}

}  // namespace muster::daemon
