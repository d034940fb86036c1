#!/usr/bin/env bash
# The wheel that pyproject.toml describes (meson-python): built with
# `pip wheel --no-deps --no-build-isolation`, it holds the muster package
# and nothing else, installs into a `python3 -m venv --system-site-packages`
# (Debian's python refuses pip outside a venv), and there `import muster`
# finds the wheel's copy and `import torch` the system's.
# Usage: wheel_check.sh SOURCE_ROOT WORKDIR    (77 = skipped, saying why)
set -euo pipefail
src=$1
work=$2
py=/usr/bin/python3
"$py" -c 'import mesonpy' 2>/dev/null || { echo "SKIP: python3-mesonpy is not installed"; exit 77; }
"$py" -c 'import torch' 2>/dev/null || { echo "SKIP: $py cannot import torch"; exit 77; }
"$py" -m venv --help >/dev/null 2>&1 || { echo "SKIP: python3-venv is not installed"; exit 77; }
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*"; exit 1; }

(cd "$work" && "$py" -m pip wheel --no-deps --no-build-isolation --wheel-dir "$work/dist" "$src") \
  >"$work/wheel.log" 2>&1 || { tail -n 60 "$work/wheel.log"; fail "pip wheel"; }
whl=$(ls "$work"/dist/muster-*.whl)
echo "built $(basename "$whl")"
# The package only: muster/ and the wheel's metadata; no executables,
# headers or a libmuster.so beside it.
"$py" - "$whl" <<'PY' || fail "the wheel holds more than the muster package"
import re, sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
print("\n".join(names))
# The .py files may sit in the wheel's purelib data directory.
names = [re.sub(r"^muster-[^/]*\.data/(purelib|platlib)/", "", n) for n in names]
assert any(n.startswith("muster/_muster") and n.endswith(".so") for n in names), "no extension"
assert "muster/distributed.py" in names, "no distributed.py"
assert "muster/LICENSE" in names, "no LICENSE (Apache-2.0) in the package"
stray = [n for n in names if not (n.startswith("muster/") or ".dist-info/" in n)]
assert not stray, stray
PY

"$py" -m venv --system-site-packages "$work/venv"
"$work/venv/bin/python" -m pip install --no-deps --no-index "$whl" >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "pip install of the wheel"; }
# From / so that no source tree on the way can stand in for the package.
(cd / && env -u PYTHONPATH "$work/venv/bin/python" - "$work/venv") <<'PY' || fail "imports in the venv"
import os, sys
import muster
import torch
venv = os.path.realpath(sys.argv[1])
assert os.path.realpath(muster.__file__).startswith(venv), f"muster from {muster.__file__}"
assert os.path.realpath(muster._muster.__file__).startswith(venv), muster._muster.__file__
assert issubclass(muster.MusterStore, torch.distributed.Store)
print(f"muster {muster.__version__} from {os.path.dirname(muster.__file__)}, torch {torch.__version__}")
PY
echo "OK: the wheel installs into a venv with the system's packages; muster and torch import"
