# Sourced (with the script's arguments) by the shell tests that run muster's
# programs between daemons they start (cluster_netns.sh, slurm_cluster.sh):
# MUSTERD, MUSTER and WORKER from the arguments or tests/meson.build's
# variables, a failure where one is missing (not a skip: the build made
# them), SELF for re-running the script, and skip (exit 77 with the reason).
MUSTERD=${1:-${MUSTER_TEST_MUSTERD:-}}
MUSTER=${2:-${MUSTER_TEST_MUSTER:-}}
WORKER=${3:-${MUSTER_TEST_CLUSTER_WORKER:-}}
for p in "$MUSTERD" "$MUSTER" "$WORKER"; do
  if [[ -z "$p" || ! -x "$p" ]]; then
    echo "FAIL: program '$p' missing (set MUSTER_TEST_MUSTERD, MUSTER_TEST_MUSTER," \
      "MUSTER_TEST_CLUSTER_WORKER or give them as arguments)" >&2
    exit 1
  fi
done
SELF=$(readlink -f "$0")
skip() {
  echo "SKIP: $*"
  exit 77
}
