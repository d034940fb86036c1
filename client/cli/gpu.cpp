// `muster gpu drain N --reason TEXT` and `muster gpu undrain N`: root takes a
// GPU out of service (its holder keeps it until its rank ends; nobody is
// given it after; the drain survives daemon restarts) and puts it back.
#include <charconv>
#include <iostream>

#include "cli/commands.hpp"
#include "endpoint.hpp"
#include "muster/client.hpp"

namespace muster::cli {

namespace {
const char* kGpuUsage =
    "Usage: muster gpu drain N --reason TEXT\n"
    "       muster gpu undrain N\n\n"
    "Root (or the uid musterd runs as) only. drain: GPU N (its NVML index, as\n"
    "'muster status' shows it) is given to nobody from now on; a rank that holds\n"
    "it keeps it until the rank ends. The drain and its reason show in 'muster\n"
    "status' and survive a restart of musterd. undrain: GPU N may be leased\n"
    "again; it also clears a quarantine that a critical XID left (once the GPU\n"
    "was reset). Health found at start (ECC errors, lost, MIG) is checked\n"
    "again at every start and is not cleared this way.\n";

int usage_error(const std::string& why) {
  std::cerr << "muster gpu: " << why << "\nTry 'muster gpu --help'.\n";
  return 2;
}
}  // namespace

int gpu_main(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "-h" || args[0] == "--help")) {
    std::cout << kGpuUsage;
    return 0;
  }
  if (args.size() < 2) return usage_error("needs drain or undrain and a GPU index");
  const std::string& verb = args[0];
  if (verb != "drain" && verb != "undrain") return usage_error("unknown command '" + verb + "'");
  uint32_t device = 0;
  const std::string& n = args[1];
  if (auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), device);
      ec != std::errc() || end != n.data() + n.size())
    return usage_error("'" + n + "' is not a GPU index");
  std::string reason;
  for (size_t i = 2; i < args.size(); ++i) {
    if (args[i] == "--reason" && i + 1 < args.size() && verb == "drain")
      reason = args[++i];
    else if (args[i].rfind("--reason=", 0) == 0 && verb == "drain")
      reason = args[i].substr(9);
    else
      return usage_error("unknown argument '" + args[i] + "'");
  }
  if (verb == "drain" && reason.empty())
    return usage_error("a drain needs --reason TEXT (it shows in muster status)");
  try {
    Client c({resolve_endpoint()});
    if (verb == "drain")
      c.drain_gpu(device, reason);
    else
      c.undrain_gpu(device);
  } catch (const Error& e) {
    std::cerr << "muster gpu " << verb << ": " << e.what() << "\n";
    return 1;
  }
  std::cout << "GPU " << device << (verb == "drain" ? " drained: " + reason : " undrained") << "\n";
  return 0;
}

}  // namespace muster::cli
