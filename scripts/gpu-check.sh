#!/usr/bin/env bash
# The checks that need real GPUs, one line each: PASS, FAIL or SKIP (with
# the GPU count). Installs nothing; builds into build-gpu/ with CUDA and
# NCCL required, and finishes within 5 minutes (each step is time-boxed).
#   scripts/gpu-check.sh
set -u
cd "$(dirname "$0")/.." || exit 1
fails=0
say() { printf '%-6s %s\n' "$1" "$2"; [ "$1" = FAIL ] && fails=$((fails + 1)); return 0; }

ngpu=0
if command -v nvidia-smi >/dev/null 2>&1; then
  ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
fi

if timeout 200 meson setup build-gpu -Dcuda=enabled -Dnccl=enabled >/tmp/gpu-check-setup.log 2>&1 \
  || timeout 30 meson configure build-gpu -Dcuda=enabled -Dnccl=enabled >>/tmp/gpu-check-setup.log 2>&1; then
  if timeout 240 ninja -C build-gpu daemon/musterd client/muster tests/test_gpu tests/gpu_allreduce_worker >/tmp/gpu-check-build.log 2>&1; then
    say PASS "build with CUDA and NCCL"
  else
    say FAIL "build with CUDA and NCCL (see /tmp/gpu-check-build.log)"
  fi
else
  say FAIL "meson setup with CUDA and NCCL (see /tmp/gpu-check-setup.log)"
fi

if [ "$ngpu" -lt 1 ]; then
  say SKIP "test_gpu: $ngpu GPU(s)"
  say SKIP "NVML inventory against nvidia-smi -q: $ngpu GPU(s)"
else
  out=$(MUSTER_TEST_MUSTERD=$PWD/build-gpu/daemon/musterd timeout 120 build-gpu/tests/test_gpu 2>&1)
  case $? in
    0) say PASS "test_gpu on $ngpu GPU(s)" ;;
    77) say SKIP "test_gpu: $(echo "$out" | tail -1)" ;;
    *) say FAIL "test_gpu: $(echo "$out" | tail -1)" ;;
  esac
  # Every UUID nvidia-smi reports, in its (PCI bus) order, is musterd's GPU
  # of the same index.
  dir=$(mktemp -d)
  build-gpu/daemon/musterd --runtime-dir "$dir" --no-config --log-level error &
  pid=$!
  for _ in $(seq 50); do [ -S "$dir/musterd.sock" ] && break; sleep 0.1; done
  ours=$(MUSTER_ENDPOINT=ipc://$dir/musterd.sock timeout 10 build-gpu/client/muster status --json |
    python3 -c 'import json,sys; print(" ".join(d["uuid"] or "-" for d in json.load(sys.stdin)["devices"]))')
  kill "$pid"; wait "$pid" 2>/dev/null; rm -rf "$dir"
  smi=$(nvidia-smi -q | awk -F' : ' '/^ *GPU UUID/ {printf "%s ", $2}' | sed 's/ $//')
  if [ "$ours" = "$smi" ]; then
    say PASS "NVML inventory matches nvidia-smi -q ($ngpu UUIDs in bus order)"
  else
    say FAIL "NVML inventory [$ours] differs from nvidia-smi -q [$smi]"
  fi
fi

if [ "$ngpu" -lt 2 ]; then
  say SKIP "NCCL all-reduce under muster run with ncclCommInitRankScalable (2 ids): $ngpu GPU(s)"
else
  # One rank per GPU on muster run's embedded daemon; each checks its sum.
  out=$(timeout 180 build-gpu/client/muster run --nproc-per-node "$ngpu" \
    -- build-gpu/tests/gpu_allreduce_worker 2 2>&1)
  rc=$?
  oks=$(echo "$out" | grep -c 'all-reduce over 2 ids ok')
  if [ "$rc" -eq 0 ] && [ "$oks" -eq "$ngpu" ]; then
    say PASS "NCCL all-reduce under muster run, ncclCommInitRankScalable with 2 ids, $ngpu GPUs"
  else
    say FAIL "NCCL all-reduce under muster run (exit $rc, $oks of $ngpu ranks ok): $(echo "$out" | tail -1)"
  fi
fi
exit $((fails > 0))
