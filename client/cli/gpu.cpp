// `muster gpu drain N --reason TEXT` and `muster gpu undrain N`: root takes a
// GPU out of service (its holder keeps it until its rank ends; nobody is
// given it after; the drain survives daemon restarts) and puts it back.
#include <algorithm>
#include <charconv>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/daemon_probe.hpp"
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

std::vector<Flag> gpu_flags(bool& help, std::string& reason, bool& reason_given) {
  return {{"help", 'h', "", "print this help and exit",
           [&help](const std::string& v) { help = switch_value(v); }},
          {"reason", 0, "TEXT", "drain: why (it shows in muster status); a drain needs one",
           [&reason, &reason_given](const std::string& v) {
             reason = v;
             reason_given = true;
           }}};
}

int gpu_main(const std::vector<std::string>& args) {
  bool help = false, reason_given = false;
  std::string reason;
  FlagParser flags(gpu_flags(help, reason, reason_given));
  std::vector<std::string> words;
  if (!parse_plain("gpu", flags, args, &words)) return 2;
  if (help) {
    std::cout << kGpuUsage << "\nOptions:\n" << flags.help();
    return 0;
  }
  if (words.empty()) return usage_error("needs drain or undrain and a GPU index");
  const std::string verb = words[0];
  std::vector<std::string> verbs;
  for (const auto& v : kGpuVerbs) verbs.push_back(v.name);
  if (std::find(verbs.begin(), verbs.end(), verb) == verbs.end())
    return usage_error("unknown command '" + verb + "'" + did_you_mean(verb, verbs));
  if (words.size() < 2) return usage_error(verb + " needs a GPU index");
  if (words.size() > 2) return usage_error("unrecognized argument '" + words[2] + "'");
  uint32_t device = 0;
  const std::string& n = words[1];
  if (auto [end, ec] = std::from_chars(n.data(), n.data() + n.size(), device);
      ec != std::errc() || end != n.data() + n.size())
    return usage_error("'" + n + "' is not a GPU index");
  if (verb == "undrain" && reason_given)
    return usage_error("--reason goes with drain only; an undrain takes none");
  if (verb == "drain" && reason.empty())
    return usage_error("a drain needs --reason TEXT (it shows in muster status)");
  const std::string endpoint = resolve_endpoint();
  // At once, rather than after the request timeout.
  if (auto p = probe_daemon(endpoint); p.reach != Reach::kOk) {
    std::cerr << "muster gpu " << verb << ": " << p.sentence << "\n";
    return 1;
  }
  try {
    Client c({endpoint});
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
