// The launcher's relay for torch's env:// store (muster run, muster launch).
//
// With env://, rank 0 hosts the job's TCPStore on MASTER_PORT, but it only
// listens once its `import torch` is done; a rank that reaches its connect
// first is refused, and torch's client (1.13) sleeps a fixed second before
// it tries again. StoreRelay listens on MASTER_PORT before any worker
// starts, so every connect succeeds at once, and joins each connection, byte
// for byte, to rank 0's store on an inner port as soon as rank 0 listens
// there (rank 0 alone is given that port as its MASTER_PORT). Nothing is
// parsed: the bytes are torch's own protocol, whichever torch it is.
#pragma once

#include <thread>

namespace muster::cli {

class StoreRelay {
 public:
  // Listens on `port` on every interface (as torch's store would; 0: any
  // free port, see port()) and relays to 127.0.0.1:`inner_port`. Throws
  // std::system_error when `port` cannot be had.
  StoreRelay(int port, int inner_port);
  ~StoreRelay();  // stops the thread, closes every connection
  StoreRelay(const StoreRelay&) = delete;
  StoreRelay& operator=(const StoreRelay&) = delete;

  int port() const { return port_; }
  int inner_port() const { return inner_port_; }

 private:
  void loop();

  int port_;
  int inner_port_;
  int listen_ = -1;
  int wake_[2] = {-1, -1};  // a byte here stops loop()
  std::thread thread_;
};

}  // namespace muster::cli
