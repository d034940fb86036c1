#!/usr/bin/env bash
# Installs what is needed (Debian 12, as root), builds with -Werror and runs
# every test. --features-off builds with CUDA, NCCL, libsystemd and Python
# disabled, which must pass as well. --sanitize builds a debug build with
# AddressSanitizer and UndefinedBehaviorSanitizer (build-asan) and runs the
# suite under them.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-debian.sh --tests
dir=build
opts=(-Dwerror=true)
test_args=()
if [[ "${1:-}" == "--features-off" ]]; then
  dir=build-nofeatures
  # A unity build, as demo.sh makes: two sources that each define the same
  # file-local name fail here, not first in a newcomer's quick start.
  opts+=(-Dauto_features=disabled -Dunity=on -Dunity_size=24)
elif [[ "${1:-}" == "--sanitize" ]]; then
  dir=build-asan
  # b_lundef=false: libmuster.so leaves the sanitizer runtime's symbols to
  # the executable. Python is disabled: the muster module (and ctypes'
  # libmuster.so) loaded into /usr/bin/python3 would need LD_PRELOAD of
  # libasan, and torch under ASan is slow and noisy; the C++ tests cover the
  # same daemon and library code.
  # system_tests (a real Slurm, a real Prometheus) run in the default build only.
  opts+=(-Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debug -Dpython=disabled
    -Dsystem_tests=disabled)
  export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:abort_on_error=1:print_summary=1
  export UBSAN_OPTIONS=halt_on_error=1:abort_on_error=1:print_stacktrace=1:print_summary=1
  export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
fi
# The default build type, also over demo.sh's release build of build/.
[[ "$dir" == build ]] && opts+=(-Dbuildtype=debugoptimized -Dunity=off)
if [[ -d "$dir" ]]; then
  meson setup --reconfigure "$dir" "${opts[@]}"
else
  meson setup "$dir" "${opts[@]}"
fi
ninja -C "$dir"
run_args=()
if [[ "$dir" == build-asan ]]; then
  # A debug build under the sanitizers runs 2-3x slower than the default
  # one: CI saw reply-cache take 45 s of its 60 and cluster-bcast 114 of
  # 180. The timeouts are the default build's, doubled here.
  run_args+=(--timeout-multiplier 2)
  # Every test but two whose uninstrumented programs load the instrumented
  # libmuster.so (python3 through ctypes; the installed-package C/C++ check),
  # which ASan refuses without LD_PRELOAD; the normal builds run both.
  mapfile -t test_args < <(meson test -C "$dir" --list 2>/dev/null |
    sed -n 's|^[^ ]* / ||p' | grep -vx -e ctypes -e install)
fi
meson test -C "$dir" --print-errorlogs "${run_args[@]}" "${test_args[@]}"
