#!/usr/bin/env bash
# Installs what building muster needs (Debian 12, as root), builds only what
# the demo runs, and runs the main job: a real 4-rank job of the C++ example
# under `muster run`, on an embedded daemon (no GPU, no service, no torch
# needed), then shows that the job's ranks cooperated.
#   demo.sh --torch   also installs PyTorch and the Python module's build
#                     dependencies and runs examples/python/pretrain.py the
#                     same way (without --torch it runs when torch is there)
set -euo pipefail
cd "$(dirname "$0")/.."
torch=
case "${1:-}" in
  "") ;;
  --torch) torch=--torch ;;
  *) echo "usage: $0 [--torch]" >&2; exit 2 ;;
esac
./scripts/setup-debian.sh $torch
if [[ ! -d build ]]; then
  # What a newcomer waits for here is the compiler, not the job: no
  # optimisation and no debug info, and a unity build (24 sources a
  # translation unit), which parses the ZeroMQ, msgpack and standard headers
  # a few times instead of once a source. On 2 cores: 35 s instead of 3m18
  # for a non-unity release build of the same two targets. test.sh
  # reconfigures the same directory with its own build type, unity off;
  # its --features-off build keeps the unity build compiling.
  meson setup build --buildtype=plain -Dunity=on -Dunity_size=24
elif [[ -n "$torch" ]]; then
  meson setup --reconfigure build  # finds pybind11 if it was installed just now
fi
targets=(client/muster examples/cpp/hello_muster)
py=/usr/bin/python3
have_torch=
if "$py" -c 'import torch' 2>/dev/null; then
  have_torch=1
  # The Python module's targets (the extension and its .py files), when the
  # build has them: meson names them in `ninja -t targets`.
  mapfile -t -O ${#targets[@]} targets < <(ninja -C build -t targets all 2>/dev/null |
    sed -n 's|^\(client/python/muster/[^:]*\): .*|\1|p')
fi
ninja -C build "${targets[@]}"
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
if [[ -z "$have_torch" ]]; then
  echo "--- PyTorch example skipped: $py cannot import torch (./scripts/demo.sh --torch installs it)"
elif ! compgen -G "build/client/python/muster/_muster*.so" >/dev/null; then
  echo "--- PyTorch example skipped: the muster Python module was not built (python feature off, or pybind11 or the Python headers missing)"
else
  echo "--- PyTorch: examples/python/pretrain.py, 4 ranks on gloo"
  MUSTER_RUNTIME_DIR="$out/run-py" PYTHONPATH="$PWD/build/client/python" \
    build/client/muster run -n 4 --cpu --use-env "$py" examples/python/pretrain.py \
    --checkpoint "$out/pretrain.pt"
fi
