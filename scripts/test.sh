#!/usr/bin/env bash
# Installs what is needed (Debian 12, as root), builds with -Werror and runs
# every test. --features-off builds with CUDA, NCCL, libsystemd and Python
# disabled, which must pass as well.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-debian.sh
dir=build
opts=(-Dwerror=true)
if [[ "${1:-}" == "--features-off" ]]; then
  dir=build-nofeatures
  opts+=(-Dauto_features=disabled)
fi
if [[ -d "$dir" ]]; then
  meson setup --reconfigure "$dir" "${opts[@]}"
else
  meson setup "$dir" "${opts[@]}"
fi
ninja -C "$dir"
meson test -C "$dir" --print-errorlogs
