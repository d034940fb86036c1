#!/usr/bin/env bash
# Builds the fuzz targets with clang's libFuzzer, ASan and UBSan (straight
# from the sources, no meson: the daemon's state, protocol and liveness code,
# not its sockets), then fuzzes each for a bounded time:
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
mkdir -p "$out/include" "$out/corpus"
# state.cpp and status.cpp want the version from meson's generated header.
version=$(sed -n "s/^ *version: '\([^']*\)'.*/\1/p" meson.build | head -1)
printf '#pragma once\n#define MUSTER_VERSION "%s"\n' "$version" >"$out/include/muster_config.h.new"
cmp -s "$out/include/muster_config.h.new" "$out/include/muster_config.h" ||
  mv "$out/include/muster_config.h.new" "$out/include/muster_config.h"
rm -f "$out/include/muster_config.h.new"

cxx=${CXX_FUZZ:-clang++}
flags=(-std=c++20 -g -O1 -DMSGPACK_NO_BOOST=1 -D_GNU_SOURCE
  -Icommon -Icommon/include -Idaemon -Itests -I"$out/include")
# Every file of the protocol: a message file added later is not left out.
protocol=(common/protocol/*.cpp)

if [[ "${1:-}" == "--make-corpus" ]]; then
  "$cxx" "${flags[@]}" tests/fuzz/make_corpus.cpp "${protocol[@]}" -o "$out/make_corpus"
  rm -rf tests/fuzz/corpus
  mkdir -p tests/fuzz/corpus
  "$out/make_corpus" tests/fuzz/corpus
  ls -l tests/fuzz/corpus
  exit 0
fi

seconds=${1:-60}
# Two targets once fuzzed SECONDS each; four now share the same total.
per=$((seconds * 2 / 4))
# Whole folders, so that a file split off in one of them is compiled too.
sources=("${protocol[@]}" common/log.cpp common/log_limit.cpp common/wait_text.cpp common/sampler/sampler.cpp
  common/escape.cpp common/job_id.cpp common/host_address.cpp
  daemon/core/*.cpp daemon/jobs/*.cpp daemon/cluster/*.cpp daemon/liveness/pidwatch.cpp
  daemon/liveness/proc_uids.cpp daemon/gpu/placement.cpp)
san=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
# The daemon's sources are compiled once for both targets (objects of the
# fuzzer-instrumented build; -fsanitize=fuzzer-no-link for all but the
# targets themselves), two at a time.
mkdir -p "$out/obj"
objs=()
pids=()
for src in "${sources[@]}" daemon/persist/*.cpp; do
  obj="$out/obj/$(echo "$src" | tr / _).o"
  objs+=("$obj")
  rm -f "$obj"
  "$cxx" "${flags[@]}" -fsanitize=fuzzer-no-link,address,undefined \
    -fno-sanitize-recover=undefined -c "$src" -o "$obj" &
  pids+=($!)
  if ((${#pids[@]} >= 2)); then
    wait "${pids[0]}"  # its status: a failed compile stops the script (set -e)
    pids=("${pids[@]:1}")
  fi
done
for pid in "${pids[@]}"; do wait "$pid"; done
for target in fuzz_request fuzz_access fuzz_hostile fuzz_links; do
  "$cxx" "${flags[@]}" "${san[@]}" "tests/fuzz/$target.cpp" "${objs[@]}" -o "$out/$target"
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
