#!/usr/bin/env bash
# The GPU checks on a machine that has a GPU and can build muster too: makes
# the bundle (scripts/gpu-bundle.sh) and runs its check. A lent GPU machine
# that reaches no package registry gets the bundle made here instead and
# runs only `bash .gpu-bundle/run.sh` (see scripts/gpu-bundle.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/gpu-bundle.sh
exec bash .gpu-bundle/run.sh
