// Copying the workers' captured stdout and stderr to muster run's own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "cli/spawn.hpp"
#include "cli/std_spec.hpp"

namespace muster::cli {

// Copies the workers' captured output to muster run's stdout and stderr on
// a thread of its own, whole lines at a time, each prefixed `[rankN]: `
// when prefix is set, and keeps the last lines of each rank's stderr.
class OutputPump {
 public:
  OutputPump(bool prefix, size_t tail_lines);
  ~OutputPump();
  OutputPump(const OutputPump&) = delete;
  OutputPump& operator=(const OutputPump&) = delete;
  // Takes over w.out_fd and w.err_fd; call before start(). routes: log
  // files (torchrun's --redirects/--tee; the bytes as written) and whether
  // each stream also reaches the console. Throws when a file cannot be made.
  void add(Worker& w, const StreamRoutes& routes = {});
  void start();
  // Reads on until every pipe is at EOF or drain_s has passed, writes out
  // unfinished lines and stops the thread.
  void finish(double drain_s);
  // The last lines rank wrote to stderr (after finish()).
  std::deque<std::string> tail(uint32_t rank) const;

 private:
  // The pump's thread and what it reads: the pipes, their unfinished
  // lines and the stderr tails.
  struct StreamReader;
  std::unique_ptr<StreamReader> reader_;
};

}  // namespace muster::cli
