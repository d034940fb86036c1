#!/usr/bin/env bash
# One multi-node job across network namespaces: a "hub" namespace holding a
# Linux bridge, and 3 node namespaces ("hosts"), each linked to the bridge by
# a veth pair and given its own address in 10.231.147.0/24. One musterd per
# node namespace (node 0's also the coordinator, listening on its own
# address only), one `muster run --nnodes 3 -n 2` per node run inside that
# node's namespace. All the traffic between daemons crosses the veth links;
# nothing is added to the root namespace.
#
# Needs root and `ip netns`; otherwise exits 77 (skipped) saying why.
# Programs: $MUSTER_TEST_MUSTERD, $MUSTER_TEST_MUSTER and
# $MUSTER_TEST_CLUSTER_WORKER (tests/meson.build's test_env), or the first
# three arguments.
set -euo pipefail

# Worker mode: muster run starts this script as each rank's program; it
# reports what the launcher told it, then becomes the cluster worker.
if [[ -n "${MUSTER_NETNS_WORKER:-}" ]]; then
  echo "master=${MASTER_ADDR:-}:${MASTER_PORT:-} group=${GROUP_RANK:-}"
  exec "$MUSTER_NETNS_WORKER"
fi

source "$(dirname "$(readlink -f "$0")")/script_programs.sh" "$@"
[[ $(id -u) -eq 0 ]] || skip "needs root to create network namespaces (running as uid $(id -u))"
command -v ip >/dev/null 2>&1 || skip "the 'ip' command (iproute2) is not installed"

NODES=3
NPROC=2
WORLD=$((NODES * NPROC))
NET=10.231.147  # all traffic stays inside this test's namespaces
PORT=29400
JOB=netns-$$
HUB=muster-hub-$$
NS=()
ADDR=()
for ((i = 0; i < NODES; i++)); do
  NS+=("muster-node$i-$$")
  ADDR+=("$NET.$((i + 1))")
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/muster-netns.XXXXXX")
CREATED=()  # namespaces this test made (and so deletes)
DAEMONS=()  # musterd pids
RUNS=()     # muster run pids
failed=0

cleanup() {
  local rc=$?
  set +e
  for pid in "${RUNS[@]}" "${DAEMONS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${RUNS[@]}" "${DAEMONS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  # Whatever still lives in this test's own namespaces (started here) goes too,
  # or a namespace would outlive its name.
  for ns in "${CREATED[@]}"; do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
  done
  # Deleting a namespace deletes its links (veth ends, the bridge) with it.
  for ns in "${CREATED[@]}"; do ip netns del "$ns" 2>/dev/null; done
  if [[ $rc -ne 0 && $rc -ne 77 ]]; then
    for f in "$WORK"/*.log; do
      [[ -e "$f" ]] || continue
      echo "===== $(basename "$f") ====="
      cat "$f"
    done
  fi
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the network ----------------------------------------------------------
ip netns add "$HUB" 2>"$WORK/netns-add.err" ||
  skip "'ip netns add' failed: $(tr '\n' ' ' <"$WORK/netns-add.err")"
CREATED+=("$HUB")
for ns in "${NS[@]}"; do
  ip netns add "$ns" || skip "'ip netns add $ns' failed"
  CREATED+=("$ns")
done

net() {  # a network setup step; a kernel without bridges or veths is a skip
  "$@" 2>"$WORK/net.err" || skip "network setup '$*' failed: $(tr '\n' ' ' <"$WORK/net.err")"
}
net ip -n "$HUB" link set lo up
net ip -n "$HUB" link add br0 type bridge
net ip -n "$HUB" link set br0 up
for ((i = 0; i < NODES; i++)); do
  # Made inside the hub namespace, the other end moved straight into the node's:
  # no name ever appears in the root namespace.
  net ip -n "$HUB" link add "p$i" type veth peer name eth0 netns "${NS[$i]}"
  net ip -n "$HUB" link set "p$i" master br0
  net ip -n "$HUB" link set "p$i" up
  net ip -n "${NS[$i]}" link set lo up
  net ip -n "${NS[$i]}" addr add "${ADDR[$i]}/24" dev eth0
  net ip -n "${NS[$i]}" link set eth0 up
done

# The links work: every node reaches node 0 (the coordinator) over the bridge.
if command -v ping >/dev/null 2>&1; then
  for ((i = 1; i < NODES; i++)); do
    ok=0
    for _ in $(seq 50); do
      if ip netns exec "${NS[$i]}" ping -c1 -W1 "${ADDR[0]}" >/dev/null 2>&1; then ok=1; break; fi
      sleep 0.1
    done
    [[ $ok -eq 1 ]] || { echo "FAIL: ${NS[$i]} cannot ping ${ADDR[0]} over the bridge" >&2; exit 1; }
  done
fi

# --- the daemons ----------------------------------------------------------
for ((i = 0; i < NODES; i++)); do
  dir="$WORK/node$i"
  mkdir -p "$dir"
  args=(--no-config --runtime-dir "$dir" --log-level info --peer-plain --peer-timeout 2)
  if [[ $i -eq 0 ]]; then args+=(--peer-bind "${ADDR[0]}" --peer-port "$PORT"); fi
  ip netns exec "${NS[$i]}" "$MUSTERD" "${args[@]}" >"$WORK/musterd$i.log" 2>&1 &
  DAEMONS+=($!)
done
for ((i = 0; i < NODES; i++)); do
  up=0
  for _ in $(seq 300); do  # 30 s: tests run in parallel on small machines
    if [[ -S "$WORK/node$i/musterd.sock" ]] &&
      MUSTER_ENDPOINT="ipc://$WORK/node$i/musterd.sock" "$MUSTER" status >/dev/null 2>&1; then
      up=1
      break
    fi
    kill -0 "${DAEMONS[$i]}" 2>/dev/null || break
    sleep 0.1
  done
  [[ $up -eq 1 ]] || { echo "FAIL: musterd in ${NS[$i]} did not come up" >&2; exit 1; }
done

# --- the job --------------------------------------------------------------
for ((i = 0; i < NODES; i++)); do
  ip netns exec "${NS[$i]}" env MUSTER_ENDPOINT="ipc://$WORK/node$i/musterd.sock" \
    MUSTER_NETNS_WORKER="$WORKER" \
    timeout -k 5 90 "$MUSTER" run --nnodes "$NODES" -n "$NPROC" \
    --coordinator "${ADDR[0]}:$PORT" --job-id "$JOB" --cpu --use-env --rdzv-timeout 60 \
    --local-addr "${ADDR[$i]}" "$SELF" >"$WORK/run$i.log" 2>&1 &
  RUNS+=($!)
done
for ((i = 0; i < NODES; i++)); do
  rc=0
  wait "${RUNS[$i]}" || rc=$?
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: muster run in ${NS[$i]} exited $rc" >&2
    failed=1
  fi
done
RUNS=()

# --- the checks -----------------------------------------------------------
fail() {
  echo "FAIL: $*" >&2
  failed=1
}
# One record per worker: "ns=I key=value ..." merged from its [rankN]: lines.
records=$(for ((i = 0; i < NODES; i++)); do
  awk -v ns="$i" '
    /^\[rank[0-9]+\]: / {
      p = substr($1, 1, index($1, "]"))
      if (!(p in rec)) order[++n] = p
      for (k = 2; k <= NF; ++k) if (index($k, "=") > 1) rec[p] = rec[p] " " $k
    }
    END { for (j = 1; j <= n; ++j) print "ns=" ns rec[order[j]] }' "$WORK/run$i.log"
done)
field() {  # field RECORD KEY
  local w
  for w in $1; do
    if [[ "$w" == "$2="* ]]; then
      echo "${w#*=}"
      return
    fi
  done
}

nrec=$(grep -c . <<<"$records" || true)
[[ $nrec -eq $WORLD ]] || fail "$nrec workers reported, expected $WORLD"

declare -A node_of_ns=() seen_rank=() seen_shard=() master_of=()
id0="" ids0="" gen0="" master0="" relay0=""
while read -r rec; do
  [[ -n "$rec" ]] || continue
  ns=$(field "$rec" ns)
  rank=$(field "$rec" rank)
  node=$(field "$rec" node)
  what="worker {$rec}"
  [[ "$rank" =~ ^[0-9]+$ ]] || { fail "$what: no rank"; continue; }
  [[ "$node" =~ ^[0-9]+$ && "$(field "$rec" local_rank)" =~ ^[0-9]+$ ]] ||
    { fail "$what: no node or local_rank"; continue; }
  ((rank < WORLD)) || fail "$what: rank $rank out of 0..$((WORLD - 1))"
  [[ -z "${seen_rank[$rank]:-}" ]] || fail "$what: rank $rank twice"
  seen_rank[$rank]=1
  [[ "$(field "$rec" world)" == "$WORLD" ]] || fail "$what: world is not $WORLD"
  [[ "$(field "$rec" nodes)" == "$NODES" ]] || fail "$what: nodes is not $NODES"
  [[ "$rank" == "$((NPROC * node + $(field "$rec" local_rank)))" ]] ||
    fail "$what: rank is not $NPROC x node + local_rank"
  [[ "$(field "$rec" group)" == "$node" ]] || fail "$what: GROUP_RANK is not the node rank"
  if [[ -z "${node_of_ns[$ns]:-}" ]]; then node_of_ns[$ns]=$node; fi
  [[ "${node_of_ns[$ns]}" == "$node" ]] || fail "$what: two node ranks in ${NS[$ns]}"
  [[ "$(field "$rec" store)" == "ok" ]] || fail "$what: store is not ok"
  id=$(field "$rec" id)
  [[ "$id" =~ ^[0-9a-f]{16}$ ]] || fail "$what: no NCCL id"
  : "${id0:=$id}" "${ids0:=$(field "$rec" ids)}" "${gen0:=$(field "$rec" generation)}"
  [[ "$id" == "$id0" ]] || fail "$what: a different NCCL id ($id0 elsewhere)"
  [[ "$(field "$rec" ids)" == "$ids0" ]] || fail "$what: different scalable-init ids"
  [[ "$(field "$rec" generation)" == "$gen0" ]] || fail "$what: a different generation"
  master_of[$rank]=$(field "$rec" master)
  # torch's DistributedSampler: 1000 samples over 6 ranks is 167 each, all different.
  shard=$(field "$rec" shard)
  [[ "$shard" == 167:* ]] || fail "$what: shard is not 167 indices"
  [[ -z "${seen_shard[$shard]:-}" ]] || fail "$what: the same shard as another rank"
  seen_shard[$shard]=1
done <<<"$records"

[[ ${#seen_rank[@]} -eq $WORLD ]] || fail "ranks seen: ${!seen_rank[*]}, expected 0..$((WORLD - 1))"
# Rank 0 binds MASTER_PORT itself and every worker of the other nodes gets
# it; rank 0's node-mates get the port of node 0's muster run relay, which
# joins them to rank 0's store: the same address, another port.
master0=${master_of[0]:-}
for ((r = 1; r < WORLD; r++)); do
  m=${master_of[$r]:-}
  [[ -n "$m" ]] || continue
  if ((r < NPROC)); then
    : "${relay0:=$m}"
    [[ "$m" == "$relay0" ]] || fail "rank $r: a relay other than its node-mates' ($m, $relay0)"
    [[ "${m%:*}" == "${master0%:*}" && "$m" != "$master0" ]] ||
      fail "rank $r: MASTER_ADDR:PORT $m is not node 0's relay beside rank 0's $master0"
  else
    [[ "$m" == "$master0" ]] || fail "rank $r: MASTER_ADDR:PORT $m, not rank 0's $master0"
  fi
done
[[ "$gen0" == "0" ]] || fail "generation $gen0, expected 0"
# Node ranks: one per namespace, 0..2 between them; the job says so on stderr too.
master_ns=""
for ((i = 0; i < NODES; i++)); do
  node=${node_of_ns[$i]:-}
  if [[ -z "$node" ]]; then
    fail "no worker of ${NS[$i]} reported"
    continue
  fi
  [[ "$node" == 0 ]] && master_ns=$i
  grep -q "^muster run: job $JOB generation 0: node $node of $NODES, " "$WORK/run$i.log" ||
    fail "muster run in ${NS[$i]} did not report 'job $JOB generation 0: node $node of $NODES'"
done
[[ $(printf '%s\n' "${node_of_ns[@]}" | sort -u | tr '\n' ' ') == "0 1 2 " ]] ||
  fail "node ranks per namespace: ${node_of_ns[*]}, expected 0, 1 and 2"
# MASTER_ADDR: the address of the namespace that became node 0.
if [[ -n "$master_ns" ]]; then
  [[ "${master0%:*}" == "${ADDR[$master_ns]}" ]] ||
    fail "MASTER_ADDR ${master0%:*} is not node 0's address ${ADDR[$master_ns]} (${NS[$master_ns]})"
  [[ "${master0#*:}" =~ ^[1-9][0-9]*$ ]] || fail "MASTER_PORT '${master0#*:}' is no port"
  [[ "${relay0#*:}" =~ ^[1-9][0-9]*$ ]] || fail "the relay's MASTER_PORT '${relay0#*:}' is no port"
else
  fail "no namespace became node 0"
fi
# The peers' traffic went over every veth link (the coordinator binds only its
# bridge address, and the other namespaces have no other way to it).
for ((i = 0; i < NODES; i++)); do
  rx=$(ip netns exec "$HUB" cat "/sys/class/net/p$i/statistics/rx_bytes" 2>/dev/null || echo 0)
  ((rx > 0)) || fail "no traffic came over link p$i from ${NS[$i]}"
done

if [[ $failed -ne 0 ]]; then
  echo "worker records:" >&2
  echo "$records" >&2
  exit 1
fi
echo "ok: $WORLD ranks on $NODES network namespaces, node 0 = ${NS[$master_ns]} (${ADDR[$master_ns]})," \
  "MASTER_ADDR:PORT $master0, NCCL id $id0"
