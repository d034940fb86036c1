#!/usr/bin/env bash
# Runs the README's quick start without root literally: the shell block under
# "## Without root", as uid 65534 (nobody), in a copy of this tree's committed
# files, with HOME in a scratch directory. The build packages must be
# installed (scripts/setup-debian.sh). Run by hand or before a release, not
# in each CI pass (it builds muster once more). Needs root to drop to nobody.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) -eq 0 ]] || { echo "quickstart-check: run as root (it drops to uid 65534)" >&2; exit 2; }
block=$(awk '/^## Without root/{f=1} f && /^```sh/{c=1; next} c && /^```/{exit} c' README.md)
[[ -n "$block" ]] || { echo "quickstart-check: no sh block under '## Without root' in README.md" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/src"
git archive HEAD | tar -x -C "$work/src"
chmod 755 "$work"
chown -R 65534:65534 "$work/src"
echo "--- as uid 65534 in $work/src:"
echo "$block"
start=$SECONDS
setpriv --reuid=65534 --regid=65534 --clear-groups \
  env -i PATH=/usr/bin:/bin HOME="$work/src" LANG=C.UTF-8 \
  bash -euo pipefail -c "cd '$work/src'; $block"
[[ -s "$work/src/hello.txt" ]] || { echo "quickstart-check: no hello.txt written" >&2; exit 1; }
echo "--- hello.txt:"
cat "$work/src/hello.txt"
echo "--- quick start passed as uid 65534 in $((SECONDS - start)) s"
