#!/usr/bin/env bash
# Installs what is needed (Debian 12, as root), builds with -Werror and runs
# every test. --features-off builds with CUDA, NCCL, libsystemd and Python
# disabled, which must pass as well. --sanitize builds a debug build with
# AddressSanitizer and UndefinedBehaviorSanitizer (build-asan) and runs the
# suite under them.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-debian.sh --tests
# A build takes 2-4 GiB and the suite writes state and pools under /tmp: a
# disk that cannot hold them fails at a link or a save, far from the cause,
# so say how much there is first.
for where in . /tmp; do
  free_kib=$(df -Pk "$where" | awk 'NR == 2 { print $4 }')
  if ((free_kib < 8 * 1024 * 1024)); then
    echo "test.sh: only $((free_kib / 1024)) MiB free on the disk of $where; the build and" \
      "the suite need about 8 GiB" >&2
  fi
done
# A test killed by its timeout cannot remove its private daemon's directory
# (/tmp/muster-test-*, support/process.cpp): those this run leaves go with it.
stamp=$(mktemp /tmp/muster-test-run.XXXXXX)
trap 'find /tmp -maxdepth 1 -name "muster-test-*" -newer "$stamp" -exec rm -rf {} + 2>/dev/null;
  rm -f "$stamp"' EXIT
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
