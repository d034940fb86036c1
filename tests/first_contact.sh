#!/usr/bin/env bash
# First contact: the mistakes a new user makes, each against the built
# binaries. Every one is answered at once (well under the 10 s request
# timeout a client used to wait out), with the right exit code and a
# sentence that names the fix.
#   first_contact.sh MUSTER MUSTERD
# The cases of a user outside the muster group need root (a private mount
# namespace with its own /run, and uid 65534); they skip elsewhere.
set -uo pipefail
muster=$1 musterd=$2
tmp=$(mktemp -d)
chmod 755 "$tmp"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
unset MUSTER_ENDPOINT MUSTER_TIMEOUT_S MUSTER_LOG_LEVEL SLURM_JOB_ID SLURM_STEP_ID NO_COLOR
export MUSTER_RUNTIME_DIR=$tmp/run
failures=0

# expect NAME CODE TEXT... -- COMMAND...: COMMAND exits CODE within 5 s
# (its output on stdout and stderr), and its output holds every TEXT.
expect() {
  local name=$1 code=$2
  shift 2
  local texts=()
  while [[ $1 != -- ]]; do texts+=("$1"); shift; done
  shift
  local start=$SECONDS out rc
  if [[ $(type -t "$1") == function ]]; then
    out=$("$@" 2>&1)
  else
    out=$(timeout 20 "$@" 2>&1)
  fi
  rc=$?
  local took=$((SECONDS - start)) bad=""
  [[ $rc == "$code" ]] || bad+=" exit $rc, not $code;"
  ((took <= 5)) || bad+=" took ${took} s;"
  for t in "${texts[@]}"; do
    [[ $out == *"$t"* ]] || bad+=" no '$t';"
  done
  if [[ -n $bad ]]; then
    echo "FAIL $name:$bad"
    printf '  | %s\n' "$out"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

# No daemon at all: status and gpu say so at once.
expect "status, no daemon" 1 "no musterd runs at" "musterd &" -- "$muster" status
expect "gpu drain, no daemon" 1 "no musterd runs at" "musterd &" -- "$muster" gpu drain 0 --reason x

# A daemon that was SIGKILLed left its socket: stale, said at once.
mkdir -p -m 700 "$tmp/run"
"$musterd" --runtime-dir "$tmp/run" --simulate-gpus 0 --no-config 2>/dev/null &
pids+=($!)
for _ in $(seq 100); do [[ -S $tmp/run/musterd.sock ]] && break; sleep 0.05; done
"$muster" status --json >"$tmp/status.json" 2>&1
expect "status --json has a schema version" 0 '"schema_version":1' -- cat "$tmp/status.json"
kill -9 "${pids[-1]}"
wait "${pids[-1]}" 2>/dev/null
expect "status, stale socket" 1 "is gone" "start one" -- "$muster" status
expect "gpu drain, stale socket" 1 "is gone" -- "$muster" gpu drain 0 --reason x
# muster run takes the stale socket over with a daemon of its own.
expect "run over a stale socket" 0 -- "$muster" run -n 2 --cpu /bin/true

# Variables and leftovers: usage errors (2), before anything starts.
expect "MUSTER_TIMEOUT_S=abc" 2 "MUSTER_TIMEOUT_S='abc'" "unset it" -- \
  env MUSTER_TIMEOUT_S=abc "$muster" run -n 1 --cpu /bin/true
expect "MUSTER_TIMEOUT_S=abc, status" 2 "MUSTER_TIMEOUT_S='abc'" -- \
  env MUSTER_TIMEOUT_S=abc "$muster" status
expect "MUSTER_LOG_LEVEL=loud" 2 "MUSTER_LOG_LEVEL='loud'" "info" -- \
  env MUSTER_LOG_LEVEL=loud "$muster" run -n 1 --cpu /bin/true
expect "Slurm's variables left over" 2 "--slurm off" -- \
  env SLURM_JOB_ID=5 SLURM_STEP_ID=0 "$muster" run -n 1 --cpu /bin/true
expect "--slurm off ignores them" 0 -- \
  env SLURM_JOB_ID=5 SLURM_STEP_ID=0 "$muster" run --slurm off -n 1 --cpu /bin/true

# A shell script that is not executable would run with Python.
printf '#!/bin/sh\necho hello\n' >"$tmp/job.sh"
chmod 644 "$tmp/job.sh"
expect "script not executable" 2 "chmod +x" "--no-python" -- "$muster" run -n 1 --cpu "$tmp/job.sh"
expect "script with --no-python" 0 "hello" -- "$muster" run -n 1 --cpu --no-python /bin/sh "$tmp/job.sh"

# Many nodes without keys: the command line's flags, not the file's.
expect "multi-node without keys" 2 "--peer-key-file FILE" "muster keygen" "--peer-plain" -- \
  "$muster" run --nnodes 2 --rdzv-endpoint 127.0.0.1:1 --rdzv-id fc -n 1 --cpu /bin/true

# One spelling rule for the daemon's options, in the file and on the line.
printf 'simulate_gpus = 2\n' >"$tmp/good.conf"
printf 'simulate-gpu = 2\n' >"$tmp/typo.conf"
expect "musterd.conf simulate_gpus" 0 "configuration OK" -- \
  "$musterd" --config "$tmp/good.conf" --check-config
expect "musterd.conf typo" 2 "did you mean 'simulate-gpus'" -- \
  "$musterd" --config "$tmp/typo.conf" --check-config
expect "musterd --simulate_gpus" 0 "configuration OK" -- \
  "$musterd" --no-config --simulate_gpus 2 --check-config
expect "musterd unknown flag" 2 "did you mean '--stuck-after'" -- \
  "$musterd" --no-config --stuck-aftr 3 --check-config

# Conventions: -V, -v.
expect "muster -V" 0 "muster " -- "$muster" -V
expect "musterd -V" 0 "musterd " -- "$musterd" -V
expect "muster run -v" 0 -- "$muster" run -v -n 1 --cpu /bin/true
expect "muster run --log-level bad" 2 "invalid choice 'loud'" -- \
  "$muster" run --log-level loud -n 1 --cpu /bin/true

# A user outside the muster group: the node's socket says EACCES. In a
# private mount namespace with its own /run, root runs the node's musterd
# at /run/muster (root:root 0660 socket, so uid 65534 may not connect).
if [[ $(id -u) == 0 ]] && command -v unshare >/dev/null && command -v setpriv >/dev/null &&
  unshare -m true 2>/dev/null; then
  # The outsider's own directories, as a login session has them (whatever
  # this machine's /tmp allows).
  mkdir -m 700 "$tmp/nobody" && chown 65534:65534 "$tmp/nobody"
  cat >"$tmp/outsider.sh" <<EOF
set -u
mount -t tmpfs none /run
mkdir -m 755 /run/muster
"$musterd" --runtime-dir /run/muster --simulate-gpus 2 --no-config 2>/dev/null &
for _ in \$(seq 100); do [[ -S /run/muster/musterd.sock ]] && break; sleep 0.05; done
as() { setpriv --reuid 65534 --regid 65534 --clear-groups env -u MUSTER_RUNTIME_DIR USER=nobody XDG_RUNTIME_DIR=$tmp/nobody TMPDIR=$tmp/nobody "\$@"; }
echo "== status"; as "$muster" status; echo "rc=\$?"
echo "== cpu"; as "$muster" run -n 2 --cpu /bin/true; echo "rc=\$?"
echo "== gpu"; as "$muster" run -n 1 /bin/true; echo "rc=\$?"
kill %1
EOF
  outsider=$(timeout 60 unshare -m --propagation private bash "$tmp/outsider.sh" 2>&1)
  part() { sed -n "/^== $1\$/,/^rc=/p" <<<"$outsider"; }
  expect "outside the group: status" 0 "permission denied" "usermod -aG muster nobody" "rc=1" -- \
    part status
  expect "outside the group: a CPU job runs on the user's own daemon" 0 "musterd of your own" \
    "rc=0" -- part cpu
  expect "outside the group: a GPU job refuses" 0 "usermod -aG muster" "A GPU job needs" "rc=1" -- \
    part gpu
else
  echo "skip outside the group: needs root, unshare -m and setpriv"
fi

if ((failures)); then
  echo "$failures case(s) failed"
  exit 1
fi
