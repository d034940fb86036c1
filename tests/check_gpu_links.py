#!/usr/bin/env python3
"""No shipped binary links a GPU library: musterd, muster, libmuster.so and
the Python extension load NVML, the CUDA driver or runtime and NCCL at run
time, so they start on CPU-only machines and driver-only GPU nodes, and in a
torch process use torch's NCCL. Reads each file's NEEDED entries with
readelf -d; fails naming the file and the library."""
import re
import subprocess
import sys

GPU = re.compile(r"lib(cudart|cuda|nccl|nvidia-ml)\.so")


def needed(path):
    out = subprocess.run(["readelf", "-d", path], check=True, capture_output=True, text=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def main(paths):
    bad = []
    for p in paths:
        libs = needed(p)
        if not libs:
            bad.append(f"{p}: no NEEDED entries found (not a dynamic ELF file?)")
        bad += [f"{p} needs {lib}" for lib in libs if GPU.match(lib)]
        print(f"{p}: {', '.join(libs)}")
    for b in bad:
        print("FAIL:", b)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
