#!/usr/bin/env bash
# Builds the fuzz targets with clang's libFuzzer, ASan and UBSan (a meson
# build, build-fuzz, with -Dfuzz=true: each target links the daemon's own
# library), then fuzzes each for a bounded time:
#   - tests/fuzz/fuzz_request.cpp: arbitrary bytes through the decoder and
#     the handler, starting from the committed seed corpus;
#   - tests/fuzz/fuzz_access.cpp: valid requests of every type from every
#     kind of sender, against the message table's promises;
#   - tests/fuzz/fuzz_hostile.cpp: requests of every type whose fields and
#     envelope carry hostile values (huge counts, deep nesting, wrong types,
#     boundaries), against the decoder's memory bound and the quotas;
#   - tests/fuzz/fuzz_links.cpp: sequences of rendezvous, coordinators'
#     frames, reconnects and ticks from two users, against the link caps
#     and for exceptions that would escape a handler.
# Needs clang and libclang-rt-14-dev (scripts/setup-debian.sh --tests).
#   scripts/fuzz.sh [SECONDS]     fuzz for 2 x SECONDS in all (default 60), a
#                                 quarter of that for each target
#   scripts/fuzz.sh --make-corpus regenerate tests/fuzz/corpus/
# New inputs go to build-fuzz/corpus (not committed); a crash leaves its
# input in build-fuzz/ and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build-fuzz
# meson builds the targets from the daemon's own library (tests/fuzz/
# meson.build), so no source is listed here. A build-fuzz of the script
# before (plain clang, no meson) is replaced.
[[ -d "$out" && ! -d "$out/meson-private" ]] && rm -rf "$out"
opts=(-Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false -Ddebug=true
  -Doptimization=1 -Dauto_features=disabled -Dpython=disabled -Dsystem_tests=disabled)
if [[ -d "$out" ]]; then
  meson setup --reconfigure "$out" "${opts[@]}" >/dev/null
else
  CC=${CC_FUZZ:-clang} CXX=${CXX_FUZZ:-clang++} meson setup "$out" "${opts[@]}" >/dev/null
fi
mkdir -p "$out/corpus"

if [[ "${1:-}" == "--make-corpus" ]]; then
  ninja -C "$out" tests/fuzz/make_corpus
  rm -rf tests/fuzz/corpus
  mkdir -p tests/fuzz/corpus
  ASAN_OPTIONS=detect_leaks=0 "$out/tests/fuzz/make_corpus" tests/fuzz/corpus
  ls -l tests/fuzz/corpus
  exit 0
fi

seconds=${1:-60}
# Two targets once fuzzed SECONDS each; four now share the same total.
per=$((seconds * 2 / 4))
ninja -C "$out" tests/fuzz/fuzz_request tests/fuzz/fuzz_access tests/fuzz/fuzz_hostile \
  tests/fuzz/fuzz_links
for target in fuzz_request fuzz_access fuzz_hostile fuzz_links; do
  ln -sf "tests/fuzz/$target" "$out/$target"
done
cd "$out"
mkdir -p corpus-access corpus-hostile corpus-links
# Crashes (and leaks, timeouts, out-of-memory) end the run with a non-zero
# status and leave crash-*/leak-*/timeout-*/oom-* here.
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ./fuzz_request -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -max_len=4096 \
  -print_final_stats=1 -dict=../tests/fuzz/request.dict corpus ../tests/fuzz/corpus
# Requests are 3 bytes each; 64 of them build enough state to matter.
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ./fuzz_access -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -max_len=192 \
  -print_final_stats=1 corpus-access
# Choices, not bytes of the frame: a few hundred build frames of up to a
# few MiB, from the first run on (-len_control=0: several requests an
# input). No single allocation may exceed 64 MiB (decoding amplification).
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ./fuzz_hostile -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64 \
  -max_len=256 -len_control=0 -print_final_stats=1 corpus-hostile ../tests/fuzz/hostile-seeds
# Steps are 2-4 bytes each; 64 of them (the most one input takes) make and
# lose dozens of links.
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ./fuzz_links -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 -max_len=256 \
  -print_final_stats=1 corpus-links
