// `muster keygen`: a CURVE key pair for peering between daemons, in the key
// file format musterd reads (peer-key-file).
#include <unistd.h>

#include <iostream>

#include "cli/commands.hpp"
#include "cli/flag_parser.hpp"
#include "cli/posix_io.hpp"
#include "muster/error.hpp"
#include "peer/secure.hpp"

namespace muster::cli {

namespace {
const char* kKeygenUsage =
    "Usage: muster keygen [--out FILE] [--force]\n\n"
    "Makes a CURVE key pair for peering between musterd daemons (multi-node jobs).\n"
    "Without --out the key file goes to stdout and the line for authorized-keys\n"
    "files to stderr; with --out the key file goes to FILE (mode 0600) and that\n"
    "line to stdout.\n";
const char* kKeygenAfter =
    "Then set `peer-key-file = FILE` in musterd.conf. A daemon admits the daemons\n"
    "whose public keys are in its peer-authorized-keys file, and always its own:\n"
    "copying one key file to every node is the simple setup.\n";
}  // namespace

std::vector<Flag> keygen_flags(bool& help, std::string& out, bool& out_given, bool& force) {
  return {{"help", 'h', "", "print this help and exit",
           [&help](const std::string& v) { help = switch_value(v); }},
          {"out", 'o', "FILE", "write the key pair to FILE; an existing FILE is kept",
           [&out, &out_given](const std::string& v) {
             out = v;
             out_given = true;
           }},
          {"force", 0, "", "with --out: replace an existing FILE",
           [&force](const std::string& v) { force = switch_value(v); }}};
}

int keygen_main(const std::vector<std::string>& args) {
  std::string out;
  bool help = false, out_given = false, force = false;
  FlagParser flags(keygen_flags(help, out, out_given, force));
  if (!parse_plain("keygen", flags, args)) return 2;
  if (help) {
    std::cout << kKeygenUsage << "\nOptions:\n" << flags.help() << "\n" << kKeygenAfter;
    return 0;
  }
  if (out_given && out.empty()) {
    std::cerr << "muster keygen: --out needs a FILE\n";
    return 2;
  }
  if (force && out.empty()) {
    std::cerr << "muster keygen: --force only goes with --out FILE\n";
    return 2;
  }
  try {
    auto keys = daemon::peer::generate_keypair();
    std::string host = host_name();
    std::string line = keys.public_key + (host.empty() ? "" : "  # " + host);
    if (out.empty()) {
      std::cout << daemon::peer::format_key_file(keys) << std::flush;
      std::cerr << "muster keygen: the line for peer-authorized-keys files:\n" << line << "\n";
    } else {
      daemon::peer::write_key_file(out, keys, force);
      std::cerr << "muster keygen: wrote " << out
                << " (mode 0600); the line for peer-authorized-keys files:\n";
      std::cout << line << "\n";
    }
  } catch (const Error& e) {
    std::cerr << "muster keygen: " << e.what()
              << (e.code() == ErrorCode::kConflict ? " (--force replaces it)" : "") << "\n";
    return 1;
  }
  return 0;
}

}  // namespace muster::cli
