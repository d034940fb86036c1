// The launcher's relay for torch's env:// store (muster run, muster launch).
//
// With env://, rank 0 hosts the job's TCPStore on MASTER_PORT, but it only
// listens once its `import torch` is done; a rank that reaches its connect
// first is refused, and torch's client (1.13) sleeps a fixed second before
// it tries again. StoreRelay listens on a port of its own before any worker
// starts (the other ranks of rank 0's node get it as their MASTER_PORT), so
// every connect succeeds at once, and joins each connection, byte for byte,
// to rank 0's store on MASTER_PORT (the inner port) as soon as rank 0
// listens there. Rank 0 binds MASTER_PORT itself, so a program that binds
// the port it was given (init_method=tcp://HOST:PORT) can. Nothing is
// parsed: the bytes are torch's own protocol, whichever torch it is.
#pragma once

#include <thread>

namespace muster::cli {

// A TCP port free on loopback now (torch's default, 29500, when none can
// be had): MASTER_PORT's default.
int free_port();

class StoreRelay {
 public:
  // Listens on `port` on every interface (as torch's store would; 0: any
  // free port, see port()) and relays to 127.0.0.1:`inner_port` (0: a free
  // port the relay picks once it holds `port`, so never the same). Throws
  // std::system_error when `port` cannot be had.
  explicit StoreRelay(int port, int inner_port = 0);
  ~StoreRelay();  // stops the thread, closes every connection
  StoreRelay(const StoreRelay&) = delete;
  StoreRelay& operator=(const StoreRelay&) = delete;

  int port() const { return port_; }
  int inner_port() const { return inner_port_; }

  // A new attempt's workers are about to start: connections that never
  // reached rank 0's store (the last attempt's) are closed, so that nothing
  // they sent reaches the new rank 0's. Takes effect before any connection
  // accepted after it.
  void drop_waiting();

 private:
  void loop();
  void command(char c);

  int port_;
  int inner_port_;
  int listen_ = -1;
  int wake_[2] = {-1, -1};  // commands for loop(): 'q' stop, 'd' drop_waiting()
  size_t max_links_;
  std::thread thread_;
};

}  // namespace muster::cli
