#include "options.hpp"

#include <boost/program_options.hpp>
#include <fstream>
#include <iostream>

#include "device_list.hpp"
#include "endpoint.hpp"
#include "log.hpp"
#include "muster_config.h"

namespace po = boost::program_options;

namespace muster::daemon {

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  std::string config_file, devices;
  po::options_description cli("musterd options");
  // clang-format off
  cli.add_options()
    ("help,h", "print this help and exit")
    ("version", "print the version and exit")
    ("config", po::value(&config_file), "read options from FILE (same names, one 'name = value' a line)");
  po::options_description common("daemon settings (command line or config file)");
  common.add_options()
    ("runtime-dir", po::value(&o.config.runtime_dir)->default_value(default_runtime_dir()),
       "directory for musterd.sock and musterd.lock")
    ("devices", po::value(&devices), "GPU indices this daemon may hand out, e.g. 0,1,4,6 (default: all)")
    ("simulate-gpus", po::value(&o.config.simulate_gpus)->default_value(-1),
       "pretend N GPUs exist instead of asking NVML/CUDA (tests, demos); -1 = off")
    ("log-level", po::value(&o.log_level)->default_value("info"),
       "error, warning, notice, info or debug");
  // clang-format on
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
                << "\nClients find the daemon through MUSTER_ENDPOINT, else "
                   "MUSTER_RUNTIME_DIR, else the default runtime directory.\n";
      return std::nullopt;
    }
    if (vm.count("version")) {
      std::cout << "musterd " MUSTER_VERSION "\n";
      return std::nullopt;
    }
    if (vm.count("config")) {
      auto file = vm["config"].as<std::string>();
      std::ifstream in(file);
      if (!in) throw std::runtime_error("cannot read config file '" + file + "'");
      po::store(po::parse_config_file(in, common, false), vm);
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw std::runtime_error(e.what());
  }
  if (!devices.empty()) {
    o.config.devices = parse_device_list(devices);
    o.config.devices_given = true;
  }
  if (o.config.simulate_gpus < -1 || o.config.simulate_gpus > 4096)
    throw std::runtime_error("--simulate-gpus must be between -1 and 4096");
  log::Level lvl;
  if (!log::parse_level(o.log_level, lvl))
    throw std::runtime_error("unknown --log-level '" + o.log_level + "'");
  if (o.config.runtime_dir.empty() || o.config.runtime_dir[0] != '/')
    throw std::runtime_error("--runtime-dir must be an absolute path");
  return o;
}

}  // namespace muster::daemon
