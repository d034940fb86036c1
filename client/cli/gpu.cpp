// `muster gpu drain N --reason TEXT` and `muster gpu undrain N`: root takes a
// GPU out of service (its holder keeps it until its rank ends; nobody is
// given it after; the drain survives daemon restarts) and puts it back.
// `muster gpu list [--owner USER|UID]`: the GPU table, or the GPUs one
// user's jobs hold.
#include <algorithm>
#include <charconv>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/daemon_probe.hpp"
#include "cli/gpu_table.hpp"
#include "cli/posix_io.hpp"
#include "endpoint.hpp"
#include "muster/client.hpp"

namespace muster::cli {

namespace {
const char* kGpuUsage =
    "Usage: muster gpu drain N --reason TEXT\n"
    "       muster gpu undrain N\n"
    "       muster gpu list [--owner USER|UID]\n\n"
    "list: the GPUs and who holds them, as 'muster status' shows them (another\n"
    "user's holder only to root); --owner: only the GPUs that user's jobs hold.\n\n"
    "drain and undrain: root (or the uid musterd runs as) only. drain: GPU N\n"
    "(its NVML index, as 'muster status' shows it) is given to nobody from now\n"
    "on; a rank that holds it keeps it until the rank ends. The drain and its\n"
    "reason show in 'muster status' and survive a restart of musterd. undrain:\n"
    "GPU N may be leased again; it also clears a quarantine that a critical XID\n"
    "left (once the GPU was reset). Health found at start (ECC errors, lost,\n"
    "MIG) is checked again at every start and is not cleared this way.\n";

int usage_error(const std::string& why) {
  std::cerr << "muster gpu: " << why << "\nTry 'muster gpu --help'.\n";
  return 2;
}
}  // namespace

std::vector<Flag> gpu_flags(bool& help, std::string& reason, bool& reason_given,
                            std::string& owner) {
  return {{"help", 'h', "", "print this help and exit",
           [&help](const std::string& v) { help = switch_value(v); }},
          {"owner", 0, "USER|UID", "list: only the GPUs this user's jobs hold",
           [&owner](const std::string& v) { owner = v; }},
          {"reason", 0, "TEXT", "drain: why (it shows in muster status); a drain needs one",
           [&reason, &reason_given](const std::string& v) {
             reason = v;
             reason_given = true;
           }}};
}

namespace {

// `muster gpu list`: the status's GPU table, with --owner only the rows of
// that user's jobs.
int list_gpus(const std::string& owner) {
  int64_t uid = -1;
  if (!owner.empty() && (uid = uid_of(owner)) < 0)
    return usage_error("--owner: no user '" + owner + "'");
  const std::string endpoint = resolve_endpoint();
  if (auto p = probe_daemon(endpoint); p.reach != Reach::kOk) {
    std::cerr << "muster gpu list: " << p.sentence << "\n";
    return 1;
  }
  try {
    auto s = Client({endpoint}).status();
    if (uid >= 0) std::erase_if(s.devices, [&](const DeviceInfo& d) { return d.owner != uid; });
    print_gpu_table(s);
  } catch (const Error& e) {
    std::cerr << "muster gpu list: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int gpu_main(const std::vector<std::string>& args) {
  bool help = false, reason_given = false;
  std::string reason, owner;
  FlagParser flags(gpu_flags(help, reason, reason_given, owner));
  std::vector<std::string> words;
  if (!parse_plain("gpu", flags, args, &words)) return 2;
  if (help) {
    std::cout << kGpuUsage << "\nOptions:\n" << flags.help();
    return 0;
  }
  if (words.empty()) return usage_error("needs list, or drain or undrain and a GPU index");
  const std::string verb = words[0];
  std::vector<std::string> verbs;
  for (const auto& v : kGpuVerbs) verbs.push_back(v.name);
  if (std::find(verbs.begin(), verbs.end(), verb) == verbs.end())
    return usage_error("unknown command '" + verb + "'" + did_you_mean(verb, verbs));
  if (verb == "list") {
    if (words.size() > 1) return usage_error("unrecognized argument '" + words[1] + "'");
    if (reason_given) return usage_error("--reason goes with drain only");
    return list_gpus(owner);
  }
  if (!owner.empty()) return usage_error("--owner goes with list only");
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
