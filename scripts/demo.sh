#!/usr/bin/env bash
# Installs what is needed (Debian 12, as root), builds, and runs the main job:
# a real 4-rank job of the C++ example under `muster run`, on an embedded
# daemon (no GPU needed), then shows that the job's ranks cooperated, and
# then the PyTorch example the same way (skipped, saying why, without torch).
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

# The seed's recipe in PyTorch: examples/python/pretrain.py (init_torch on
# gloo, sync_model, the daemon's DistributedSampler, is_master) as a 4-rank
# job on an embedded daemon. Only local masters log (one loss line an
# epoch here), only the master writes the checkpoint.
py=/usr/bin/python3
if ! compgen -G "build/client/python/muster/_muster*.so" >/dev/null; then
  echo "--- PyTorch example skipped: the muster Python module was not built (python feature off, or pybind11 or the Python headers missing)"
elif ! "$py" -c 'import torch' 2>/dev/null; then
  echo "--- PyTorch example skipped: $py cannot import torch (apt-get install python3-torch)"
else
  echo "--- PyTorch: examples/python/pretrain.py, 4 ranks on gloo"
  MUSTER_RUNTIME_DIR="$out/run-py" PYTHONPATH="$PWD/build/client/python" \
    build/client/muster run -n 4 --cpu --use-env "$py" examples/python/pretrain.py \
    --checkpoint "$out/pretrain.pt"
fi
