// Test support for multi-node jobs on loopback: private daemons (own runtime
// dirs), daemon 0 listening for peers as the jobs' coordinator, and one
// `muster run` per "node" (tests/test_cluster.cpp, tests/test_cluster_bcast.cpp).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "support/process.hpp"

namespace muster::test {

inline int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    throw std::runtime_error("no free port");
  close(fd);
  return ntohs(a.sin_port);
}

// The `key=value` fields of a line a worker printed (after muster run's
// `[rankN]: ` prefix).
inline std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> f;
  auto colon = line.find(": ");
  std::istringstream in(line.substr(colon == std::string::npos ? 0 : colon + 2));
  std::string word;
  while (in >> word)
    if (auto eq = word.find('='); eq != std::string::npos)
      f[word.substr(0, eq)] = word.substr(eq + 1);
  return f;
}

// The lines of one muster run's output by worker prefix ("[rank0]", ...).
inline std::map<std::string, std::vector<std::string>> by_worker(const std::string& text) {
  std::map<std::string, std::vector<std::string>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("[rank", 0) == 0) out[line.substr(0, line.find(']') + 1)].push_back(line);
  return out;
}

struct Cluster {
  int port = free_port();
  std::vector<std::unique_ptr<TestDaemon>> daemons;
  std::string nproc = "2";  // ranks per node in run()
  // Daemon 0 coordinates. tree_width > 0: every daemon listens (any free
  // port) so that nodes can relay for their children, and the coordinator
  // builds a tree that wide. names: the daemons' --node-name (default:
  // the host name). peer_timeout: seconds (--peer-timeout).
  explicit Cluster(int n, int tree_width = -1, const std::vector<std::string>& names = {},
                   const std::string& peer_timeout = "2") {
    for (int i = 0; i < n; ++i) {
      std::vector<std::string> args = {"--peer-plain", "--peer-timeout", peer_timeout};
      if (static_cast<size_t>(i) < names.size()) args.insert(args.end(), {"--node-name", names[i]});
      if (i == 0)
        args.insert(args.end(), {"--peer-bind", "127.0.0.1", "--peer-port", std::to_string(port)});
      else if (tree_width > 0)
        args.insert(args.end(), {"--peer-bind", "127.0.0.1", "--peer-port", "0"});
      if (tree_width >= 0) args.insert(args.end(), {"--tree-width", std::to_string(tree_width)});
      daemons.push_back(std::make_unique<TestDaemon>(args));
    }
  }
  std::string coordinator() const { return "127.0.0.1:" + std::to_string(port); }
  // muster run of `nproc` ranks (cluster_worker) on daemon `node`.
  std::unique_ptr<Process> run(int node, const std::string& job, const std::string& nnodes,
                               std::vector<std::string> extra = {},
                               std::vector<std::string> worker_args = {}) {
    std::vector<std::string> argv = {program("MUSTER_TEST_MUSTER"),
                                     "run",
                                     "--nnodes",
                                     nnodes,
                                     "-n",
                                     nproc,
                                     "--coordinator",
                                     coordinator(),
                                     "--job-id",
                                     job,
                                     "--cpu",
                                     "--use-env",
                                     "--local-addr",
                                     "127.0.0.1"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(program("MUSTER_TEST_CLUSTER_WORKER"));
    argv.insert(argv.end(), worker_args.begin(), worker_args.end());
    return std::make_unique<Process>(
        argv, std::map<std::string, std::string>{{"MUSTER_ENDPOINT", daemons[node]->endpoint()}},
        true);
  }
};

// n daemons of a cluster that all listen for peers (--tree-width width),
// daemon 0 on the cluster's port logging at debug level to log_file (its
// lines name the node each relayed message came from).
inline void add_listening(Cluster& c, int n, const std::string& width,
                          const std::string& log_file) {
  for (int i = 0; i < n; ++i) {
    const bool coordinator = c.daemons.empty();
    std::vector<std::string> args = {"--peer-plain",
                                     "--peer-timeout",
                                     "2",
                                     "--peer-bind",
                                     "127.0.0.1",
                                     "--peer-port",
                                     coordinator ? std::to_string(c.port) : "0",
                                     "--tree-width",
                                     width};
    std::map<std::string, std::string> env;
    if (coordinator) {
      args.insert(args.end(), {"--log-level", "debug"});
      env["MUSTER_LOG_SINK"] = "file:" + log_file;
    }
    c.daemons.push_back(std::make_unique<TestDaemon>(args, env));
  }
}

}  // namespace muster::test
