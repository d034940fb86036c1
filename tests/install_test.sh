#!/bin/sh
# `meson install` into a DESTDIR, then checks what a packager ships: the
# programs, libmuster with its soname and only muster_*/muster:: exported,
# muster.pc, the headers, the units and the example config; and builds a C
# and a C++ program with the installed muster.pc and runs each as a 2-rank
# job under the installed `muster run`, against the installed musterd.
# Usage: install_test.sh BUILD_ROOT PROGRAMS_DIR   (CC and CXX from the env)
set -u
build=$1 src=$2
fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d) || exit 1
daemon_pid=
cleanup() {
  [ -n "$daemon_pid" ] && kill "$daemon_pid" 2>/dev/null && wait "$daemon_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
dest=$work/dest

meson install -C "$build" --destdir "$dest" --no-rebuild --quiet >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "meson install"; }

prefix=$(meson introspect "$build" --buildoptions |
  python3 -c 'import json,sys; print(next(o["value"] for o in json.load(sys.stdin) if o["name"]=="prefix"))')
root=$dest$prefix
for f in sbin/musterd bin/muster include/muster/client.hpp include/muster/broadcast.hpp \
  include/muster/launcher.hpp include/muster/status.hpp include/muster/muster.h \
  include/muster/error.hpp include/muster/version.h lib/systemd/system/musterd.service \
  lib/sysusers.d/muster.conf lib/tmpfiles.d/muster.conf share/doc/muster/musterd.conf.example \
  share/man/man1/muster.1 share/man/man8/musterd.8 share/man/man5/musterd.conf.5 \
  share/bash-completion/completions/muster share/bash-completion/completions/musterd; do
  [ -e "$root/$f" ] || fail "$prefix/$f not installed"
done
# The Python package goes where the interpreter looks (its platlib), not
# under a fixed path below the prefix.
if [ -d "$build/client/python/muster" ]; then
  platlib=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path("platlib"))')
  for f in __init__.py distributed.py; do
    [ -e "$dest$platlib/muster/$f" ] || fail "muster/$f not installed in $platlib"
  done
  ls "$dest$platlib"/muster/_muster*.so >/dev/null 2>&1 || fail "muster._muster not installed in $platlib"
fi
pc=$(find "$root" -name muster.pc | head -n 1)
[ -n "$pc" ] || fail "muster.pc not installed"
libdir=$(dirname "$(dirname "$pc")")
[ -L "$libdir/libmuster.so" ] && [ -L "$libdir/libmuster.so.0" ] || fail "libmuster.so symlinks missing in $libdir"
readelf -d "$libdir/libmuster.so" | grep -q 'SONAME.*\[libmuster\.so\.0\]' || fail "soname is not libmuster.so.0"
grep -q "^ExecStart=$prefix/sbin/musterd " "$root/lib/systemd/system/musterd.service" ||
  fail "the unit does not start $prefix/sbin/musterd"

# Exports: the C ABI and namespace muster, nothing of ZeroMQ, msgpack or std.
nm -D --defined-only -C "$libdir/libmuster.so" | cut -d' ' -f3- | sed 's/@@MUSTER_0$//' >"$work/syms"
grep -qx 'muster_client_new' "$work/syms" || fail "muster_client_new not exported"
grep -q '^muster::Client::ping' "$work/syms" || fail "muster::Client::ping not exported"
grep -qx 'typeinfo for muster::Error' "$work/syms" || fail "typeinfo for muster::Error not exported"
if grep -v -e '^muster_' -e '^muster::' -e '^\(typeinfo\|typeinfo name\|vtable\|VTT\) for muster::' \
  -e '^\(non-\)\{0,1\}virtual thunk to muster::' -e '^MUSTER_0$' "$work/syms" >"$work/extra"; then
  head -n 20 "$work/extra"
  fail "libmuster exports symbols outside muster_* and muster::"
fi
echo "libmuster.so.0 exports $(wc -l <"$work/syms") symbols, all muster_* or muster::"

# The installed musterd: --help, --check-config of the example.
export LD_LIBRARY_PATH=$libdir
"$root/sbin/musterd" --help >/dev/null || fail "musterd --help"
"$root/sbin/musterd" --check-config --config "$root/share/doc/muster/musterd.conf.example" ||
  fail "the installed example config does not check"
for args in --help "run --help" "status --help"; do
  "$root/bin/muster" $args >/dev/null || fail "muster $args"
done

# Programs built against the installed muster.pc.
export PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$dest
flags=$(pkg-config --cflags --libs muster) || fail "pkg-config muster"
echo "pkg-config --cflags --libs muster: $flags"
case $flags in *"$dest"*) ;; *) fail "pkg-config flags do not point into the DESTDIR";; esac
${CC:-cc} -std=c11 -Wall -Werror -o "$work/hello_c" "$src/hello.c" $flags || fail "compiling hello.c"
${CXX:-c++} -std=c++20 -Wall -Werror -o "$work/hello_cpp" "$src/hello.cpp" $flags ||
  fail "compiling hello.cpp"
# The collectives and the launcher API: their installed headers compile and
# their functions are exported.
cat >"$work/concepts.cpp" <<'CPP'
#include <muster/broadcast.hpp>
#include <muster/launcher.hpp>
int main(int argc, char**) {
  if (argc > 99) {
    muster::Client c;
    muster::broadcast(c, nullptr, 0);
    return static_cast<int>(muster::cluster_state(c, "job").generation);
  }
  return 0;
}
CPP
${CXX:-c++} -std=c++20 -Wall -Werror -o "$work/concepts" "$work/concepts.cpp" $flags ||
  fail "compiling against muster/broadcast.hpp and muster/launcher.hpp"

rt=$work/rt
"$root/sbin/musterd" --no-config --runtime-dir "$rt" --simulate-gpus 2 --log-level warning &
daemon_pid=$!
i=0
until [ -S "$rt/musterd.sock" ]; do
  i=$((i + 1))
  [ $i -gt 100 ] && fail "the installed musterd did not come up"
  sleep 0.1
done
export MUSTER_RUNTIME_DIR=$rt MUSTER_ENDPOINT=
for prog in hello_c hello_cpp; do
  "$root/bin/muster" run -n 2 --cpu "$work/$prog" >"$work/$prog.out" 2>&1 ||
    { cat "$work/$prog.out"; fail "$prog under muster run"; }
  cat "$work/$prog.out"
  [ "$(grep -c ' ok$' "$work/$prog.out")" -eq 2 ] || fail "$prog: expected two ranks to say ok"
done
"$root/bin/muster" status | grep -q . || fail "muster status"
echo "OK: installed into $dest; hello.c and hello.cpp ran against the installed musterd"
