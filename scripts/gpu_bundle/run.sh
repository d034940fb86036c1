#!/usr/bin/env bash
# The GPU check, run on a bare GPU machine from the folder
# scripts/gpu-bundle.sh made: nothing is built or installed there. One line
# per check, PASS, FAIL or SKIP with the reason, also in $OUT/summary.txt;
# every log in $OUT/logs.tar.gz. Each step is time-boxed; the whole runs in
# under 4 minutes on one GPU. Exit 1 when a check failed.
#   bash .gpu-bundle/run.sh
set -u
B=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$B/out}
mkdir -p "$OUT"
logs=$(mktemp -d)
summary=$OUT/summary.txt
: >"$summary"
start=$(date +%s)
fails=0
say() {
  printf '%-5s %s\n' "$1" "$2" | tee -a "$summary"
  [ "$1" = FAIL ] && fails=$((fails + 1))
  return 0
}
finish() {
  [ -n "${daemon:-}" ] && kill "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
  echo "elapsed $(($(date +%s) - start)) s" | tee -a "$summary"
  tar -czf "$OUT/logs.tar.gz" -C "$logs" . 2>/dev/null
  exit $((fails > 0))
}
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
PY=$(command -v python3 || true)
bin=$B/bin

# NCCL (too large to carry): torch's wheel's (nvidia-nccl), else any on disk.
nccl_dir=
if [ -n "$PY" ]; then
  nccl_dir=$(timeout 30 "$PY" -c '
import os, nvidia.nccl as m
for p in m.__path__:
    d = os.path.join(p, "lib")
    if os.path.exists(os.path.join(d, "libnccl.so.2")):
        print(d)
        break' 2>/dev/null)
fi
if [ -z "$nccl_dir" ]; then
  lib=$(timeout 30 find / -xdev -name libnccl.so.2 2>/dev/null | head -1)
  nccl_dir=${lib%/*}
fi
[ -n "$nccl_dir" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$nccl_dir
{
  echo "nccl_dir=$nccl_dir"
  nvidia-smi 2>&1
  "$bin/muster" --version 2>&1
  "$bin/musterd" --version 2>&1
} >"$logs/machine.txt"

ngpu=0
command -v nvidia-smi >/dev/null && ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if ! "$bin/musterd" --version >/dev/null 2>&1; then
  say FAIL "musterd --version: the binary does not start ($(tail -1 "$logs/machine.txt"))"
  finish
fi
say PASS "musterd starts with nothing installed: $(grep -h '^NVML:' "$logs/machine.txt" | head -1)"
if [ "$ngpu" -lt 1 ]; then
  say SKIP "every GPU check: no GPU (nvidia-smi -L lists none)"
  finish
fi

# The daemon on the real NVML, idle: its CPU time over 3 s.
rt=$(mktemp -d)
"$bin/musterd" --runtime-dir "$rt" --no-config --log-level info 2>"$logs/musterd.log" &
daemon=$!
for _ in $(seq 100); do [ -S "$rt/musterd.sock" ] && break; sleep 0.05; done
export MUSTER_ENDPOINT=ipc://$rt/musterd.sock
sleep 1
ticks() { awk '{print $14 + $15}' "/proc/$daemon/stat"; }
t0=$(ticks)
sleep 3
t1=$(ticks)
pct=$(((t1 - t0) * 100 / $(getconf CLK_TCK) / 3))
if [ "$pct" -lt 5 ]; then
  say PASS "musterd idle on the real NVML: ${pct}% of a core over 3 s"
else
  say FAIL "musterd busy while idle: ${pct}% of a core over 3 s"
fi

# Inventory: NVML through musterd against nvidia-smi, UUIDs and bus ids in order.
timeout 10 "$bin/muster" status --json >"$logs/status.json" 2>&1
ours=$("$PY" - "$logs/status.json" 2>&1 <<'PY'
import json, sys
devices = json.load(open(sys.argv[1]))["devices"]
print(" ".join(f"{d['uuid']}@{d['pci_bus_id']}" for d in devices))
PY
)
smi=$(nvidia-smi --query-gpu=uuid,pci.bus_id --format=csv,noheader | tr -d ' ' | tr ',' '@' | paste -sd' ')
if [ "$ours" = "$smi" ]; then
  say PASS "inventory matches nvidia-smi ($ngpu GPU(s), UUID@bus: $smi)"
else
  say FAIL "inventory [$ours] differs from nvidia-smi [$smi]"
fi

# The lease reaches the rank as the right device on each form of
# CUDA_VISIBLE_DEVICES; the same run proves NCCL ran (out-of-place
# all-reduce through a muster-brokered id, the output buffer written).
uuid0=$(nvidia-smi --query-gpu=uuid --format=csv,noheader -i 0 | tr -d ' ')
for form in unset 0 "$uuid0" "${uuid0:0:12}"; do
  log=$logs/lease-${form//[^A-Za-z0-9-]/_}.log
  if [ "$form" = unset ]; then
    timeout 60 env -u CUDA_VISIBLE_DEVICES "$bin/muster" run --nproc-per-node 1 --no-python \
      -- "$bin/gpu_allreduce_worker" 1 >"$log" 2>&1
  else
    timeout 60 env CUDA_VISIBLE_DEVICES="$form" "$bin/muster" run --nproc-per-node 1 --no-python \
      -- "$bin/gpu_allreduce_worker" 1 >"$log" 2>&1
  fi
  rc=$?
  line=$(grep -h 'all-reduce over' "$log" | head -1)
  if [ $rc -eq 0 ] && echo "$line" | grep -q "leased $uuid0 opened $uuid0: all-reduce over 1 ids ok"; then
    say PASS "CUDA_VISIBLE_DEVICES=$form: the rank opened the leased GPU $uuid0"
    [ "$form" = unset ] && say PASS "NCCL all-reduce out of place through a muster-brokered id: output written"
  else
    say FAIL "CUDA_VISIBLE_DEVICES=$form (exit $rc): ${line:-$(tail -1 "$log")}"
  fi
done

if [ "$ngpu" -ge 2 ]; then
  timeout 90 "$bin/muster" run --nproc-per-node "$ngpu" --no-python \
    -- "$bin/gpu_allreduce_worker" 2 >"$logs/scalable.log" 2>&1
  rc=$?
  oks=$(grep -c 'all-reduce over 2 ids ok' "$logs/scalable.log")
  if [ $rc -eq 0 ] && [ "$oks" -eq "$ngpu" ]; then
    say PASS "ncclCommInitRankScalable with muster's 2 roots, $ngpu GPUs"
  else
    say FAIL "ncclCommInitRankScalable (exit $rc, $oks of $ngpu ranks ok): $(tail -1 "$logs/scalable.log")"
  fi
else
  say SKIP "ncclCommInitRankScalable with several roots: needs 2 GPUs, this machine has $ngpu"
fi

# test_gpu: select_device, init_communicator and sync_model, a rank a GPU.
MUSTER_TEST_MUSTERD=$bin/musterd timeout 90 "$bin/test_gpu" >"$logs/test_gpu.log" 2>&1
case $? in
  0) say PASS "test_gpu (sync_model) on $ngpu GPU(s)" ;;
  77) say SKIP "test_gpu: $(tail -1 "$logs/test_gpu.log")" ;;
  *) say FAIL "test_gpu: $(tail -1 "$logs/test_gpu.log")" ;;
esac

# init_torch("nccl"): the extension is compiled here, for this Python.
if [ -z "$PY" ] || ! timeout 60 "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' \
  >"$logs/torch.log" 2>&1; then
  say SKIP "init_torch(\"nccl\"): no python3 with a CUDA build of torch here"
else
  suffix=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
  if ! timeout 150 c++ -std=c++20 -O1 -shared -fPIC $("$PY" -m pybind11 --includes 2>/dev/null) \
    -I"$B/include" "$B/python/_muster.cpp" "$B/lib/libmuster.so.0" \
    -Wl,--disable-new-dtags,-rpath,"$B/lib" \
    -o "$B/python/muster/_muster$suffix" >"$logs/extension.log" 2>&1; then
    say SKIP "init_torch(\"nccl\"): the muster extension did not compile for $("$PY" -V 2>&1) here: $(tail -1 "$logs/extension.log")"
  else
    # The ranks' Python without the bundle's libraries first on the path
    # (they are older than this machine's, which its torch needs): the
    # extension finds libmuster and its ZeroMQ through its RPATH instead.
    PYTHONPATH=$B/python timeout 120 "$bin/muster" run --nproc-per-node "$ngpu" --no-python \
      -- env -u LD_LIBRARY_PATH "$PY" "$B/torch_nccl_check.py" >"$logs/init_torch.log" 2>&1
    rc=$?
    oks=$(grep -c 'init_torch nccl all_reduce ok' "$logs/init_torch.log")
    if [ $rc -eq 0 ] && [ "$oks" -eq "$ngpu" ]; then
      say PASS "init_torch(\"nccl\") + all_reduce on $ngpu GPU(s) ($("$PY" -c 'import torch; print("torch", torch.__version__)'))"
    else
      say FAIL "init_torch(\"nccl\") (exit $rc, $oks of $ngpu ranks ok): $(tail -1 "$logs/init_torch.log")"
    fi
  fi
fi
finish
