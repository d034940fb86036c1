#!/bin/bash
# A real Prometheus (Debian's) scrapes a private musterd while a job runs,
# and answers queries for a few muster_* series through its HTTP API.
# Usage: prometheus_scrape.sh MUSTERD MUSTER_TEST_RANK
# Exit 77 (skip) with a reason when prometheus or curl is missing; every
# process started here is ended on exit, whatever happens (trap).
set -u
musterd=$1
rank=$2
for tool in prometheus curl python3; do
  command -v "$tool" >/dev/null || { echo "SKIP: $tool is not installed"; exit 77; }
done

work=$(mktemp -d /tmp/muster-prom-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
  sleep 0.5
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in $(seq 50); do [ -e /proc/$p ] || break; sleep 0.1; done
    [ -e /proc/$p ] && echo "process $p did not end" >&2
  done
  [ -n "${KEEP_WORK:-}" ] || rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# A free loopback port (the kernel's pick, released for Prometheus).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

"$musterd" --runtime-dir "$work/run" --no-config --simulate-gpus 2 --containment guardian \
  --metrics-listen 127.0.0.1:0 --log-level warning &
pids+=($!)
for _ in $(seq 300); do [ -s "$work/run/metrics-endpoint" ] && break; sleep 0.1; done
target=$(cat "$work/run/metrics-endpoint" 2>/dev/null) || fail "musterd wrote no metrics-endpoint"

# Two ranks of job "prom-job" hold both GPUs while Prometheus scrapes.
for r in 0 1; do
  MUSTER_ENDPOINT="ipc://$work/run/musterd.sock" "$rank" prom-job 2 $r gpu > "$work/rank$r.out" &
  pids+=($!)
done

port=$(free_port)
cat > "$work/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: musterd
    static_configs:
      - targets: ['$target']
YML
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address=127.0.0.1:$port > "$work/prometheus.log" 2>&1 &
pids+=($!)

# query EXPR: the first result's value, or nothing.
query() {
  curl -s --max-time 5 "http://127.0.0.1:$port/api/v1/query" --data-urlencode "query=$1" |
    python3 -c 'import json,sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "")' 2>/dev/null
}
# await EXPR WANT: up to 60 s (the first scrape takes a few).
await() {
  local got=""
  for _ in $(seq 120); do
    got=$(query "$1")
    [ "$got" = "$2" ] && { echo "ok: $1 = $got"; return 0; }
    sleep 0.5
  done
  tail -5 "$work/prometheus.log" >&2
  fail "$1 is '$got', not $2"
}

await 'up{job="musterd"}' 1
cat "$work"/rank*.out
await 'muster_job_ranks{job_id="prom-job",state="joined"}' 2
await 'sum(muster_gpu_leased{job_id="prom-job"})' 2
await 'muster_requests_total{type="join"}' 2
await 'count(muster_request_duration_seconds_bucket{type="join"})' 14
echo "Prometheus scraped musterd and answered for its series"
