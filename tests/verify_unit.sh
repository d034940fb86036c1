#!/bin/sh
# systemd-analyze verify of the generated musterd.service, with ExecStart
# pointed at the built musterd (verify wants the binary to exist). Any
# warning about the unit fails the test, not only a non-zero exit: verify
# exits 0 after "ignoring" a line it cannot parse.
# Usage: verify_unit.sh UNIT MUSTERD TYPE(notify|simple)
set -u
unit=$1 musterd=$2 type=$3
if ! command -v systemd-analyze >/dev/null 2>&1; then
  echo "SKIP: systemd-analyze not found"
  exit 77
fi
dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
sed "s|^ExecStart=[^ ]*/musterd|ExecStart=$musterd|" "$unit" >"$dir/musterd.service"
grep -q "^ExecStart=$musterd " "$dir/musterd.service" || { echo "FAIL: no ExecStart=.../musterd line"; exit 1; }
grep -qx "Type=$type" "$dir/musterd.service" || { echo "FAIL: expected Type=$type"; exit 1; }
if [ "$type" = notify ]; then
  grep -q '^WatchdogSec=' "$dir/musterd.service" || { echo "FAIL: Type=notify without WatchdogSec"; exit 1; }
else
  ! grep -q '^WatchdogSec=' "$dir/musterd.service" || { echo "FAIL: WatchdogSec without libsystemd"; exit 1; }
fi
for want in Restart=on-failure RuntimeDirectory=muster RuntimeDirectoryPreserve=restart \
  StateDirectory=muster \
  ConfigurationDirectory=muster NoNewPrivileges=yes ProtectSystem=strict ProtectHome=yes \
  PrivateTmp=yes SystemCallFilter=@system-service DevicePolicy=closed Delegate=yes; do
  grep -qx "$want" "$dir/musterd.service" || { echo "FAIL: missing $want"; exit 1; }
done
out=$(cd "$dir" && systemd-analyze verify --man=no ./musterd.service 2>&1)
rc=$?
printf '%s\n' "$out"
if [ $rc -ne 0 ]; then
  echo "FAIL: systemd-analyze verify exited $rc"
  exit 1
fi
if printf '%s\n' "$out" | grep -q 'musterd'; then
  echo "FAIL: systemd-analyze verify warned about the unit"
  exit 1
fi
echo "OK: systemd-analyze verify accepts musterd.service (Type=$type)"
