#!/usr/bin/env bash
# Installs what is needed (Debian 12, as root), builds, and runs the main job:
# a real 4-rank job of the C++ example under `muster run`, on an embedded
# daemon (no GPU needed), then shows that the job's ranks cooperated.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-debian.sh
[[ -d build ]] || meson setup build
ninja -C build
out=$(mktemp -d)
# A private runtime directory: the embedded daemon lives as long as the job.
MUSTER_RUNTIME_DIR="$out/run" build/client/muster run -n 4 \
  build/examples/cpp/hello_muster --out "$out/result.txt"
echo "--- written once, by the master (rank 0): $out/result.txt"
cat "$out/result.txt"
