#!/usr/bin/env bash
# Installs what muster needs on Debian 12 (run as root). Idempotent.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
pkgs=(build-essential pkg-config meson ninja-build
  libzmq3-dev cppzmq-dev libmsgpack-dev libmsgpack-cxx-dev
  libboost-program-options-dev catch2 pybind11-dev libsystemd-dev
  nlohmann-json3-dev libxxhash-dev
  python3-torch python3-numpy python3-mesonpy python3-venv python3-pip
  clang libclang-rt-14-dev
  libmicrohttpd-dev slurmctld slurmd slurm-client munge prometheus curl)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
