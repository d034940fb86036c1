#!/usr/bin/env bash
# Installs what muster needs on Debian 12 (run as root). Idempotent.
#   setup-debian.sh           what building muster and running its main job
#                             (the C++ example under muster run) needs
#   setup-debian.sh --torch   and the Python module with PyTorch (the demo's
#                             PyTorch half)
#   setup-debian.sh --tests   everything the test suite uses: the above,
#                             libsystemd and libmicrohttpd (the optional
#                             features), clang with its sanitizer runtime, a
#                             Slurm cluster (slurmctld, slurmd, munge) and
#                             Prometheus for the system tests, the wheel tools
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(build-essential pkg-config meson ninja-build
  libzmq3-dev cppzmq-dev libmsgpack-dev libmsgpack-cxx-dev
  libboost-program-options-dev nlohmann-json3-dev libxxhash-dev
  catch2)  # header-only; meson setup wants it for the test targets
torch=(pybind11-dev python3-dev python3-torch python3-numpy)
tests=(libsystemd-dev libmicrohttpd-dev
  python3-mesonpy python3-venv python3-pip
  clang libclang-rt-14-dev
  slurmctld slurmd slurm-client munge prometheus curl)
case "${1:-}" in
  "") ;;
  --torch) pkgs+=("${torch[@]}") ;;
  --tests) pkgs+=("${torch[@]}" "${tests[@]}") ;;
  *) echo "usage: $0 [--torch | --tests]" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
