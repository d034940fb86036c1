#!/usr/bin/env bash
# muster under a real Slurm (issue #22): munge, slurmctld and two slurmd node
# daemons (n1, n2: Debian's slurmd runs several nodes on one host with -N),
# all started here with everything in a temporary directory, in a private
# mount namespace (unshare -m): the node names resolve through a hosts file
# bind-mounted over /etc/hosts; the daemons' ports are free ones. (Not a
# network namespace: slurmctld cannot bind with only a loopback there.) Each "node" has its own MUSTER_RUNTIME_DIR, keyed by
# SLURMD_NODENAME (the task wrapper below). The scenarios:
#   world    srun -N2 --ntasks-per-node=1 muster run -n 2 (embedded daemons):
#            a world of 4 with Slurm's job id and torchrun's variables
#   signals  scancel --signal=USR1 reaches each rank once, a USR1 sent to
#            muster run is passed on; scancel leaves no process of the job
#   bad-exit srun --kill-on-bad-exit: a failing rank ends the step non-zero
#   tasks    srun -N2 --ntasks-per-node=2 muster run --slurm-task, a system
#            musterd per node: RANK=SLURM_PROCID, one GPU lease per task
#   gpus     a step given GPUs 1 and 3 of 4 (SLURM_STEP_GPUS and
#            CUDA_VISIBLE_DEVICES as Slurm sets them) leases only those
#   verified a musterd with slurm-gpus = verified: Slurm's gres/gpu gives a
#            job one GPU and slurmd's Prolog (muster slurm-hook) records it;
#            a task that forges four in its environment gets that one, a
#            process outside Slurm none; the Epilog removes the record
# Needs root, slurmctld, slurmd, srun, munged and unshare; otherwise, or when
# the daemons do not come up, exits 77 saying why. Programs: $MUSTER_TEST_MUSTERD,
# $MUSTER_TEST_MUSTER and $MUSTER_TEST_CLUSTER_WORKER (tests/meson.build).
set -euo pipefail

# --- what srun runs: this script again, in one of these modes ------------------
case "${MUSTER_SLURM_MODE:-}" in
  task)  # one task: its node's runtime directory, then the command
    export MUSTER_RUNTIME_DIR=${MUSTER_SLURM_RT:-$MUSTER_SLURM_WORK/rt-$SLURMD_NODENAME}
    unset MUSTER_ENDPOINT
    # The GPUs Slurm's gres/gpu would give the step (the "gpus" scenario).
    if [[ -n "${MUSTER_SLURM_GPUS:-}" ]]; then export SLURM_STEP_GPUS=$MUSTER_SLURM_GPUS; fi
    if [[ -n "${MUSTER_SLURM_CVD:-}" ]]; then export CUDA_VISIBLE_DEVICES=$MUSTER_SLURM_CVD; fi
    export MUSTER_SLURM_MODE=${MUSTER_SLURM_NEXT:-worker}
    exec "$@"
    ;;
  verified)  # a rank of the verified scenario: its GPU and Slurm's record
    echo "verified device=$MUSTER_DEVICE record=$(tr '\n' ' ' <"$MUSTER_SLURM_WORK/slurm-v/$SLURM_JOB_ID")"
    exit 0
    ;;
  worker)  # a rank: what it was told, then the cluster worker (joins, store)
    echo "env rank=$RANK local=$LOCAL_RANK world=$WORLD_SIZE group=$GROUP_RANK" \
      "lws=$LOCAL_WORLD_SIZE node=$SLURMD_NODENAME job=$MUSTER_JOB_ID" \
      "procid=$SLURM_PROCID device=$MUSTER_DEVICE master=$MASTER_ADDR"
    exec "$MUSTER_TEST_CLUSTER_WORKER"
    ;;
  sleeper)  # a rank that counts SIGUSR1s until it is stopped (no child
    # processes: every signal it gets is its own)
    exec python3 -c '
import os, signal, sys
n = 0
def usr1(sig, frame):
    global n
    n += 1
    with open(os.environ["MUSTER_SLURM_WORK"] + "/usr1.log", "a") as f:
        f.write("usr1 rank=%s n=%d\n" % (os.environ["RANK"], n))
signal.signal(signal.SIGUSR1, usr1)
with open(os.environ["MUSTER_SLURM_WORK"] + "/sleepers.log", "a") as f:
    f.write("%s %d\n" % (os.environ["RANK"], os.getpid()))
while True:
    signal.pause()
'
    ;;
  failer)  # rank 3 fails after a moment, the others wait
    echo "$RANK $$" >>"$MUSTER_SLURM_WORK/failers.log"
    if [[ "$RANK" == 3 ]]; then sleep 2; exit 3; fi
    while :; do sleep 0.1; done
    ;;
esac

source "$(dirname "$(readlink -f "$0")")/script_programs.sh" "$@"

if [[ -z "${MUSTER_SLURM_INSIDE:-}" ]]; then
  [[ $(id -u) -eq 0 ]] || skip "needs root to start slurmd and slurmctld (running as uid $(id -u))"
  for p in slurmctld slurmd srun scancel sinfo munged unshare python3; do
    command -v "$p" >/dev/null 2>&1 || skip "'$p' is not installed (slurmctld slurmd slurm-client munge)"
  done
  unshare -m true 2>/dev/null || skip "'unshare -m' is not permitted here"
  export MUSTER_SLURM_INSIDE=1
  exec unshare -m "$SELF" "$MUSTERD" "$MUSTER" "$WORKER"
fi

# --- inside the private mount namespace --------------------------------------
WORK=$(mktemp -d "${TMPDIR:-/tmp}/muster-slurm.XXXXXX")
chmod 755 "$WORK"  # munge's socket must be reachable by everyone
export MUSTER_SLURM_WORK=$WORK MUSTER_TEST_CLUSTER_WORKER=$WORKER
unset MUSTER_ENDPOINT
PIDS=()     # daemons started here
DAEMONS=()  # musterd pids
failed=0

# Every process of this test carries MUSTER_SLURM_WORK=$WORK in its
# environment (srun passes it on): these are the ones still alive.
leftovers() {
  local p
  for p in /proc/[0-9]*; do
    [[ "${p#/proc/}" == "$$" ]] && continue
    if { tr '\0' '\n' <"$p/environ"; } 2>/dev/null | grep -qx "${1:-MUSTER_SLURM_WORK=$WORK}"; then
      echo "${p#/proc/} $({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null | cut -c1-120)"
    fi
  done
}

cleanup() {
  local rc=$?
  set +e
  timeout 5 scancel --quiet --user=root 2>/dev/null
  for pid in "${DAEMONS[@]}" "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for pid in "${DAEMONS[@]}" "${PIDS[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
  done
  # slurmstepd and anything of the jobs that outlived them: this test's too.
  while read -r pid _; do kill -KILL "$pid" 2>/dev/null; done < <(leftovers)
  pkill_own() { local p; for p in $(pgrep -x "$1"); do
    { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -q "SLURM_CONF=$WORK" && kill -KILL "$p"
  done; }
  pkill_own slurmstepd
  if [[ $rc -ne 0 && $rc -ne 77 ]] || [[ -n "${MUSTER_SLURM_KEEP_LOGS:-}" ]]; then
    for f in "$WORK"/*.log "$WORK"/log/*.log; do
      [[ -e "$f" ]] || continue
      echo "===== $(basename "$f") ====="
      tail -n 60 "$f"
    done
  fi
  umount /etc/hosts 2>/dev/null
  rm -rf "$WORK"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() {
  echo "FAIL: $*" >&2
  failed=1
}

# --- munge, slurmctld, two slurmd --------------------------------------------
host=$(hostname -s)
printf '127.0.0.1 localhost %s n1 n2\n' "$host" >"$WORK/hosts"
mount --bind "$WORK/hosts" /etc/hosts || skip "cannot bind-mount a hosts file over /etc/hosts"
mkdir -p "$WORK/log" "$WORK/state" "$WORK/spool/n1" "$WORK/spool/n2" "$WORK/gpu"
# gres/gpu's devices (the "verified" scenario): four per node, files only.
for i in 0 1 2 3; do : >"$WORK/gpu/nvidia$i"; done
printf 'NodeName=n[1-2] Name=gpu File=%s/gpu/nvidia[0-3]\n' "$WORK" >"$WORK/gres.conf"
# slurmd's Prolog and Epilog: muster's hook, as an operator installs it,
# run by slurmd with the job's SLURM_JOB_ID and SLURM_JOB_UID. This Slurm
# (22.05, the GPUs plain files) sets no SLURM_JOB_GPUS for a prolog, though
# gres/gpu gives the job one (SLURM_GPUS_ON_NODE=1): the wrapper says GPU 2,
# as gres/gpu would, unless slurmd set it.
for hook in prolog epilog; do
  printf '#!/bin/sh\nexport SLURM_JOB_GPUS="${SLURM_JOB_GPUS-2}"\nexec "%s" slurm-hook %s --slurm-dir "%s/slurm-v"\n' \
    "$MUSTER" "$hook" "$WORK" >"$WORK/$hook.sh"
  chmod 755 "$WORK/$hook.sh"
done
dd if=/dev/urandom of="$WORK/munge.key" bs=1024 count=1 2>/dev/null
chmod 400 "$WORK/munge.key"
munged -F -f --socket="$WORK/munge.sock" --key-file="$WORK/munge.key" \
  --log-file="$WORK/log/munged.log" --pid-file="$WORK/munged.pid" \
  --seed-file="$WORK/munged.seed" >>"$WORK/log/munged.out" 2>&1 &
PIDS+=($!)
# Nothing of a Slurm this test may run under: only its own.
for v in $(compgen -e | grep '^SLURM_' || true); do unset "$v"; done
export SLURM_CONF=$WORK/slurm.conf
# Free ports for slurmctld, n1's and n2's slurmd, and the node daemons' peer
# port (musterd's default 29400 when it is free: the coordinator --slurm
# finds without being told).
read -r -a PORTS <<<"$(python3 -c '
import socket
socks = [socket.socket() for _ in range(4)]
for s in socks: s.bind(("127.0.0.1", 0))
ports = [s.getsockname()[1] for s in socks]
try:
    t = socket.socket(); t.bind(("0.0.0.0", 29400)); t.close(); ports[3] = 29400
except OSError: pass
print(*ports)')"
cat >"$SLURM_CONF" <<EOF
ClusterName=mustertest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmctldPort=${PORTS[0]}
SlurmdPort=${PORTS[1]}
AuthType=auth/munge
AuthInfo=socket=$WORK/munge.sock
CredType=cred/munge
StateSaveLocation=$WORK/state
SlurmdSpoolDir=$WORK/spool/%n
SlurmctldPidFile=$WORK/slurmctld.pid
SlurmdPidFile=$WORK/slurmd-%n.pid
SlurmctldLogFile=$WORK/log/slurmctld.log
SlurmdLogFile=$WORK/log/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
ReturnToService=2
SchedulerType=sched/builtin
SelectType=select/cons_tres
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MailProg=/bin/true
KillWait=3
InactiveLimit=0
GresTypes=gpu
Prolog=$WORK/prolog.sh
Epilog=$WORK/epilog.sh
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=${PORTS[1]} CPUs=$(nproc) RealMemory=1000 Gres=gpu:4
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=${PORTS[2]} CPUs=$(nproc) RealMemory=1000 Gres=gpu:4
PartitionName=debug Nodes=n[1-2] Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
for _ in $(seq 50); do [[ -S "$WORK/munge.sock" ]] && break; sleep 0.1; done
[[ -S "$WORK/munge.sock" ]] || skip "munged did not come up"
slurmctld -D -f "$SLURM_CONF" >>"$WORK/log/slurmctld.out" 2>&1 &
PIDS+=($!)
for n in n1 n2; do
  slurmd -D -f "$SLURM_CONF" -N "$n" >>"$WORK/log/slurmd-$n.out" 2>&1 &
  PIDS+=($!)
done
up=0
SECONDS=0
while ((SECONDS < 40)); do
  for pid in "${PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null || skip "a Slurm daemon exited: $(tail -n 2 "$WORK"/log/*.out | tr '\n' ' ')"
  done
  if [[ $(timeout 5 sinfo -h -N -o '%N %t' 2>/dev/null | grep -c ' idle') -eq 2 ]]; then
    up=1
    break
  fi
  sleep 0.3
done
[[ $up -eq 1 ]] || skip "slurmctld and two slurmd did not come up: $(timeout 5 sinfo -N 2>&1 | tr '\n' ' ')"
echo "Slurm is up: $(sinfo -h -N -o '%N:%t' | tr '\n' ' ')"

SRUN=(timeout -k 5 90 srun --quiet --export=ALL)
TASK=(env MUSTER_SLURM_MODE=task "$SELF")

# The job id of the newest job (srun ran in the foreground or background).
last_job() { squeue -h -o %i 2>/dev/null | sort -n | tail -n 1; }
wait_lines() {  # wait_lines FILE N SECONDS: until FILE has N lines
  local end=$((SECONDS + $3))
  while ((SECONDS < end)); do
    [[ -f "$1" && $(grep -c . "$1") -ge $2 ]] && return 0
    sleep 0.2
  done
  return 1
}
# No process of job $1 (its SLURM_JOB_ID in the environment) within $2 s.
gone() {
  local end=$((SECONDS + $2))
  while ((SECONDS < end)); do
    [[ -z "$(leftovers "SLURM_JOB_ID=$1")" ]] && return 0
    sleep 0.2
  done
  return 1
}

# --- world: one task per node, embedded daemons --------------------------------
out=$WORK/world.out
rc=0
"${SRUN[@]}" -N2 --ntasks-per-node=1 "${TASK[@]}" "$MUSTER" run --nproc-per-node 2 --cpu \
  --peer-plain --use-env --rdzv-timeout 60 "$SELF" >"$out" 2>"$WORK/world.err" || rc=$?
cat "$WORK/world.err" >>"$WORK/world.log"
[[ $rc -eq 0 ]] || fail "world: srun exited $rc: $(tail -n 5 "$WORK/world.err" | tr '\n' ' ')"
job=$(grep -o 'job=[0-9]*\.[0-9]*' "$out" | head -n 1 | cut -d= -f2)
[[ "$job" =~ ^[0-9]+\.0$ ]] || fail "world: the workers' job id is '$job', not SLURM_JOB_ID.SLURM_STEP_ID"
for r in 0 1 2 3; do
  grep -q "env rank=$r local=$((r % 2)) world=4 group=$((r / 2)) lws=2 node=n$((r / 2 + 1)) job=$job " \
    "$out" || fail "world: rank $r's environment is wrong: $(grep "env rank=$r " "$out")"
  # The daemons' world agrees, and a store across both nodes works.
  grep -q "rank=$r local_rank=$((r % 2)) world=4 node=$((r / 2)) nodes=2" "$out" ||
    fail "world: rank $r's join says otherwise: $(grep "^\[rank$r\]: rank=" "$out")"
done
[[ $(grep -c 'store=ok' "$out") -eq 4 ]] || fail "world: $(grep -c 'store=ok' "$out") of 4 ranks saw the store"
said=$(grep -c "the world from Slurm: job $job, node [01] of 2 (n[12]), coordinator n1:2[1-4][0-9][0-9][0-9] (embedded daemons)" "$WORK/world.err" || true)
[[ $said -eq 2 ]] || fail "world: $said of 2 launchers said they took the world from Slurm"
echo "world: done (job $job)"

# --- signals: USR1 from Slurm and from a user, then scancel ---------------------
"${SRUN[@]}" -N2 --ntasks-per-node=1 env MUSTER_SLURM_NEXT=sleeper "${TASK[@]}" "$MUSTER" run \
  -n 2 --cpu --peer-plain --rdzv-timeout 60 "$SELF" >"$WORK/signals.log" 2>&1 &
srun_pid=$!
if wait_lines "$WORK/sleepers.log" 4 60; then
  id=$(last_job)
  scancel --signal=USR1 "$id"
  wait_lines "$WORK/usr1.log" 4 10 || true
  sleep 1  # a second copy would have come by now
  for r in 0 1 2 3; do
    n=$(grep -c "usr1 rank=$r " "$WORK/usr1.log" 2>/dev/null || true)
    [[ $n -eq 1 ]] || fail "signals: rank $r got Slurm's SIGUSR1 $n times, not once"
  done
  # Sent to muster run itself (not by Slurm): passed on to its two workers.
  # muster run of node 0: the process whose parent is a slurmstepd.
  run0=""
  for p in $(leftovers "SLURM_JOB_ID=$id" | awk '{print $1}'); do
    pp=$(awk '{print $4}' "/proc/$p/stat" 2>/dev/null || true)
    if [[ -n "$pp" && "$(cat "/proc/$pp/comm" 2>/dev/null)" == slurmstepd ]] &&
      { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qx 'SLURM_NODEID=0'; then
      run0=$p
    fi
  done
  if [[ -n "$run0" ]]; then
    kill -USR1 "$run0"
    wait_lines "$WORK/usr1.log" 6 10 || true
    sleep 1
    for r in 0 1; do
      n=$(grep -c "usr1 rank=$r " "$WORK/usr1.log" || true)
      [[ $n -eq 2 ]] || fail "signals: rank $r got $n SIGUSR1s after one to muster run, not 2"
    done
  else
    fail "signals: no muster run of node 0 under slurmstepd"
  fi
  scancel "$id"
  gone "$id" 20 || fail "signals: after scancel, processes of job $id are left: $(leftovers "SLURM_JOB_ID=$id" | tr '\n' ';')"
else
  fail "signals: the 4 ranks did not start: $(tail -n 5 "$WORK/signals.log" | tr '\n' ' ')"
fi
wait "$srun_pid" 2>/dev/null || true
echo "signals: done"

# --- bad exit: srun --kill-on-bad-exit ends the step when a rank fails ---------
rc=0
"${SRUN[@]}" -N2 --ntasks-per-node=1 --kill-on-bad-exit=1 env MUSTER_SLURM_NEXT=failer \
  "${TASK[@]}" "$MUSTER" run -n 2 --cpu --peer-plain --rdzv-timeout 60 "$SELF" \
  >"$WORK/badexit.log" 2>&1 || rc=$?
[[ $rc -ne 0 && $rc -ne 124 ]] || fail "bad-exit: srun exited $rc (expected the failure's code)"
grep -q "rank 1 (pid [0-9]*) exited with code 3" "$WORK/badexit.log" ||
  fail "bad-exit: node 1's muster run did not report its rank's exit code 3"
# The task (muster run) exits with the rank's code, so Slurm sees it failed.
grep -q "n2: task 1: Exited with exit code 3" "$WORK/badexit.log" ||
  fail "bad-exit: node 1's muster run did not exit with its rank's code 3"
id=$(grep -o 'job [0-9]*\.' "$WORK/badexit.log" | head -n 1 | tr -dc 0-9)
t0=$SECONDS
[[ -n "$id" ]] && { gone "$id" 20 || fail "bad-exit: processes of job $id are left: $(leftovers "SLURM_JOB_ID=$id" | tr '\n' ';')"; }
echo "bad-exit: done (srun exited $rc; the job's last process gone after $((SECONDS - t0)) s)"
gone "${job%.*}" 20 || fail "world: processes of job ${job%.*} are left: $(leftovers "SLURM_JOB_ID=${job%.*}" | tr '\n' ';')"

# --- gpus: only the step's GPUs are leased (4 simulated, Slurm gave 1 and 3) ---
# SLURM_STEP_GPUS (and CUDA_VISIBLE_DEVICES) as Slurm's gres/gpu sets them
# for `--gpus=2` on a node whose GPUs are 0..3.
for cvd in "" "1,3"; do
  out=$WORK/gpus-$cvd.out
  rc=0
  "${SRUN[@]}" -N1 -n1 env MUSTER_SLURM_GPUS=1,3 MUSTER_SLURM_CVD="$cvd" "${TASK[@]}" "$MUSTER" \
    run --nproc-per-node gpu --simulate-gpus 4 --use-env "$SELF" >"$out" 2>>"$WORK/gpus.log" || rc=$?
  [[ $rc -eq 0 ]] || fail "gpus (CUDA_VISIBLE_DEVICES='$cvd'): srun exited $rc"
  devices=$(grep -o 'device=[0-9-]*' "$out" | sort | tr '\n' ' ')
  # Without CUDA_VISIBLE_DEVICES the ordinals are NVML indices; with it,
  # positions in it.
  want="device=1 device=3 "
  [[ -n "$cvd" ]] && want="device=0 device=1 "
  [[ "$devices" == "$want" ]] || fail "gpus (CUDA_VISIBLE_DEVICES='$cvd'): the ranks got '$devices', not '$want'"
  grep -q "2 GPU(s) of the step" "$WORK/gpus.log" || fail "gpus: the Slurm line names no step GPUs"
done
echo "gpus: done"

# --- tasks: one task per rank, a system musterd per node ----------------------
# Without a node daemon --slurm-task is refused, not raced for.
mkdir -p "$WORK/empty"
rc=0
"${SRUN[@]}" -N1 -n2 env MUSTER_SLURM_RT="$WORK/empty" "${TASK[@]}" "$MUSTER" run --slurm-task \
  --cpu "$SELF" >"$WORK/nodaemon.log" 2>&1 || rc=$?
[[ $rc -ne 0 ]] || fail "tasks: --slurm-task without a node daemon exited 0"
grep -q "needs this node's musterd" "$WORK/nodaemon.log" ||
  fail "tasks: no sentence for the missing node daemon: $(head -c 300 "$WORK/nodaemon.log")"
for n in n1 n2; do
  args=(--no-config --runtime-dir "$WORK/rt-$n" --log-level info --peer-plain --peer-timeout 2
    --simulate-gpus 2)
  [[ $n == n1 ]] && args+=(--peer-bind 127.0.0.1 --peer-port "${PORTS[3]}")
  "$MUSTERD" "${args[@]}" >"$WORK/musterd-$n.log" 2>&1 &
  DAEMONS+=($!)
done
for n in n1 n2; do
  for _ in $(seq 100); do
    MUSTER_ENDPOINT="ipc://$WORK/rt-$n/musterd.sock" "$MUSTER" status >/dev/null 2>&1 && break
    sleep 0.1
  done
done
# The coordinator by default is the first node's musterd at the peer port
# 29400; when that port was taken here, --slurm on with --rdzv-endpoint.
coord=()
[[ ${PORTS[3]} -eq 29400 ]] || coord=(--slurm on --rdzv-endpoint "n1:${PORTS[3]}")
out=$WORK/tasks.out
rc=0
"${SRUN[@]}" -N2 --ntasks-per-node=2 "${TASK[@]}" "$MUSTER" run --slurm-task "${coord[@]}" \
  --rdzv-timeout 60 "$SELF" >"$out" 2>"$WORK/tasks.log" || rc=$?
[[ $rc -eq 0 ]] || fail "tasks: srun exited $rc: $(tail -n 5 "$WORK/tasks.log" | tr '\n' ' ')"
job=$(grep -o 'job=[0-9]*\.[0-9]*' "$out" | head -n 1 | cut -d= -f2)
for r in 0 1 2 3; do
  grep -q "env rank=$r local=$((r % 2)) world=4 group=$((r / 2)) lws=2 node=n$((r / 2 + 1)) job=$job procid=$r device=$((r % 2)) " \
    "$out" || fail "tasks: rank $r's environment is wrong: $(grep "env rank=$r " "$out")"
  grep -q "^rank=$r local_rank=$((r % 2)) world=4 node=$((r / 2)) nodes=2" "$out" ||
    fail "tasks: rank $r's join says otherwise"
done
[[ $(grep -c 'store=ok' "$out") -eq 4 ]] || fail "tasks: $(grep -c 'store=ok' "$out") of 4 ranks saw the store"
said=$(grep -c "the world from Slurm: job $job, rank [0-3] of 4 (local [01] of 2), node [01] of 2 (n[12]), coordinator n1:${PORTS[3]} (the nodes' musterd)" "$WORK/tasks.log" || true)
[[ $said -eq 4 ]] || fail "tasks: $said of 4 tasks said they took the world from Slurm"
echo "tasks: done (job $job)"

# --- verified: slurm-gpus = verified, a job's GPUs from slurmd's Prolog --------
"$MUSTERD" --no-config --runtime-dir "$WORK/rt-v" --log-level info --simulate-gpus 4 \
  --slurm-gpus verified --slurm-dir "$WORK/slurm-v" >"$WORK/musterd-v.log" 2>&1 &
DAEMONS+=($!)
for _ in $(seq 100); do
  MUSTER_ENDPOINT="ipc://$WORK/rt-v/musterd.sock" "$MUSTER" status >/dev/null 2>&1 && break
  sleep 0.1
done
# Slurm gives the job one GPU; the task forges all four (SLURM_STEP_GPUS and
# CUDA_VISIBLE_DEVICES): the rank gets the one the Prolog recorded.
out=$WORK/verified.out
rc=0
"${SRUN[@]}" -N1 -n1 -w n1 --gres=gpu:1 env MUSTER_SLURM_RT="$WORK/rt-v" MUSTER_SLURM_GPUS=0,1,2,3 \
  MUSTER_SLURM_CVD=0,1,2,3 MUSTER_SLURM_NEXT=verified "${TASK[@]}" "$MUSTER" run \
  --nproc-per-node 1 --use-env "$SELF" >"$out" 2>>"$WORK/verified.log" || rc=$?
[[ $rc -eq 0 ]] || fail "verified: srun exited $rc: $(tail -n 3 "$WORK/verified.log" | tr '\n' ' ')"
line=$(grep -o 'verified device=.*' "$out" || true)
gpu=$(sed -n 's/.*record=uid=0 gpus=\([0-9]\) $/\1/p' <<<"$line")
[[ -n "$gpu" && "$line" == "verified device=$gpu record=uid=0 gpus=$gpu " ]] ||
  fail "verified: the rank's GPU is not the one Slurm gave the job: '$line'"
# Two ranks on a job of one GPU: refused, whatever the environment says.
rc=0
"${SRUN[@]}" -N1 -n1 -w n1 --gres=gpu:1 env MUSTER_SLURM_RT="$WORK/rt-v" MUSTER_SLURM_GPUS=0,1,2,3 \
  MUSTER_SLURM_CVD=0,1,2,3 MUSTER_SLURM_NEXT=verified "${TASK[@]}" "$MUSTER" run \
  --nproc-per-node 2 --use-env "$SELF" >"$WORK/verified2.out" 2>"$WORK/verified2.log" || rc=$?
[[ $rc -ne 0 ]] || fail "verified: two ranks leased GPUs on a job Slurm gave one"
# A process outside Slurm gets no GPU, with a sentence; a CPU job runs.
rc=0
MUSTER_RUNTIME_DIR="$WORK/rt-v" "$MUSTER" run --nproc-per-node 1 true >"$WORK/outside.log" 2>&1 || rc=$?
[[ $rc -ne 0 ]] && grep -q "runs in no Slurm job step" "$WORK/outside.log" ||
  fail "verified: a process outside Slurm was not refused a GPU: $(head -c 300 "$WORK/outside.log")"
MUSTER_RUNTIME_DIR="$WORK/rt-v" "$MUSTER" run --cpu --nproc-per-node 1 true >>"$WORK/outside.log" 2>&1 ||
  fail "verified: a CPU job outside Slurm failed: $(tail -n 3 "$WORK/outside.log" | tr '\n' ' ')"
# The Epilog forgets the job.
vjob=$(grep -o 'job [0-9]*' "$WORK/verified.log" | head -n 1 | tr -dc 0-9)
for _ in $(seq 100); do [[ -n "$vjob" && ! -e "$WORK/slurm-v/$vjob" ]] && break; sleep 0.1; done
[[ -n "$vjob" && ! -e "$WORK/slurm-v/$vjob" ]] || fail "verified: job '$vjob''s record is left after its end"
echo "verified: done (Slurm gave GPU $gpu)"

exit "$failed"
