// A worker's command line: how `muster run` (torchrun) and `muster launch`
// (torch.distributed.launch) turn PROGRAM ARGS into what each rank execs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/run_options.hpp"

namespace muster::cli {

// True for python, python3, python3.11, pypy3, ... (by file name).
bool is_python_interpreter(const std::string& program);

// Where `--local_rank=N` goes in argv (PROGRAM ARGS...): after the script,
// the `-m module` or the `-c command` when PROGRAM is a Python interpreter,
// else right after PROGRAM, before the program's own arguments — as
// torch.distributed.launch puts it after the script, never to the
// interpreter.
size_t local_rank_position(const std::vector<std::string>& argv);

// The argv rank local_rank execs: $MUSTER_PYTHON -u for a PROGRAM ending in
// .py (unless --no-python) or with --run-path, $MUSTER_PYTHON -u -m with
// --module; `--local_rank=N` only for `muster launch` without --use-env.
std::vector<std::string> worker_argv(const RunOptions& o, uint32_t local_rank);

// Empty, or why PROGRAM would fail in every worker and what to do: a script
// for another interpreter (`#!/bin/sh`) that is not executable would run
// with Python (as torchrun runs it) and fail with a SyntaxError.
std::string program_problem(const RunOptions& o);

}  // namespace muster::cli
