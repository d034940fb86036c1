#!/usr/bin/env bash
# Builds here (no GPU needed) and packs what the GPU check needs into one
# folder, .gpu-bundle/ (ignored by git): the binaries, the shared libraries
# they load that a bare GPU machine may lack (ZeroMQ and its helpers, Boost,
# libmicrohttpd, libsystemd, the CUDA 13 runtime), the Python package's
# sources (its extension is compiled there, for that machine's Python), and
# run.sh. A lent GPU machine reaches no package registry: nothing is
# installed there. What it must have is a driver (libcuda, NVML); NCCL is
# taken from torch's wheel there (nvidia-nccl) when no NCCL is bundled: NCCL
# (218 MB) does not fit the 64 MiB a call may carry.
#   scripts/gpu-bundle.sh            # then, on the GPU machine, from the repo root:
#   bash .gpu-bundle/run.sh          # PASS/FAIL/SKIP lines; $OUT/summary.txt, $OUT/logs.tar.gz
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build-gpu
bundle=.gpu-bundle
start=$(date +%s)
opts=(-Dcuda=enabled -Dnccl=enabled -Dpython=disabled -Dsystem_tests=disabled -Dmetrics=enabled)
if [[ -d $dir ]]; then
  meson setup --reconfigure "$dir" "${opts[@]}" >/dev/null
else
  meson setup "$dir" "${opts[@]}" >/dev/null
fi
ninja -C "$dir" daemon/musterd client/muster client/libmuster.so.0.1.0 tests/test_gpu \
  tests/gpu_allreduce_worker >/dev/null
rm -rf "$bundle"
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/python/muster" "$bundle/include"
cp "$dir/daemon/musterd" "$dir/client/muster" "$dir/tests/test_gpu" \
  "$dir/tests/gpu_allreduce_worker" "$bundle/bin/"
cp -L "$dir/client/libmuster.so.0" "$bundle/lib/"
# Every library the binaries load but glibc's own and the driver's.
for f in "$bundle"/bin/* "$bundle/lib/libmuster.so.0"; do
  LD_LIBRARY_PATH=$dir/client:/usr/local/cuda/lib64 ldd "$f" | awk '/=> \// {print $3}'
done | sort -u | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so* | libm.so* | libdl.so* | libpthread.so* | librt.so* | ld-linux* | libresolv.so*) ;;
    # The GPU machine's own (newer) C++ runtime: an older one first on the
    # path would break its torch, which needs the newer symbols.
    libstdc++.so* | libgcc_s.so*) ;;
    libcuda.so* | libnvidia-ml.so* | libnccl.so* | libmuster.so*) ;;
    *) cp -L "$lib" "$bundle/lib/" ;;
  esac
done
strip --strip-unneeded "$bundle"/bin/* "$bundle"/lib/*
# The Python package: its .py files and the extension's source, compiled on
# the GPU machine against that machine's Python (pybind11 there).
cp client/python/muster/*.py "$bundle/python/muster/"
cp client/python/muster/_muster.cpp "$bundle/python/"
cp -r client/include/muster common/include/muster "$bundle/include/" 2>/dev/null || true
cp -r common/include/muster/. "$bundle/include/muster/"
cp "$dir/muster_config.h" "$bundle/include/"
cp scripts/gpu_bundle/run.sh scripts/gpu_bundle/torch_nccl_check.py "$bundle/"
size=$(du -sm "$bundle" | cut -f1)
echo "gpu bundle: $bundle, ${size} MiB, made in $(($(date +%s) - start)) s"
if ((size > 60)); then
  echo "gpu bundle: over 60 MiB; a device call carries 64 MiB in all" >&2
  exit 1
fi
