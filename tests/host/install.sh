#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# install.sh BUILD: `cmake --install` into a staging directory (DESTDIR),
# as a packager does: what goes where, that an admin's exs.conf survives a
# second install, and that the installed examples build on their own
# against the staged library, with find_package(exs) and with pkg-config.
set -uo pipefail
build=$(cd "${1:?BUILD}" && pwd) || exit 1
tmp=$(mktemp -d /tmp/exs-install.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
stage=$tmp/stage
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1"; [ -z "${2:-}" ] || sed 's/^/    /' "$2" | tail -n 30; }
cache() { sed -n "s/^$1:[A-Z]*=//p" "$build/CMakeCache.txt"; }
prefix=$(cache CMAKE_INSTALL_PREFIX)
libdir=$(cache CMAKE_INSTALL_LIBDIR)
case $prefix in /usr) etc=/etc ;; *) etc=$prefix/etc ;; esac
root=$stage$prefix

if DESTDIR=$stage cmake --install "$build" >"$tmp/log1" 2>&1; then ok "cmake --install into DESTDIR"
else ko "cmake --install" "$tmp/log1"; fi
for f in bin/exsctl bin/exs-perf sbin/exsd "$libdir/libexs.so.1" include/exs.h include/sys/exs.h \
	"$libdir/pkgconfig/exs.pc" "$libdir/cmake/exs/exsConfig.cmake" "$libdir/cmake/exs/exsConfigVersion.cmake" \
	share/doc/exs/exs.conf.example share/doc/exs/LICENSE share/doc/exs/examples/CMakeLists.txt \
	share/doc/exs/examples/exs-echo-server.c share/man/man8/exsctl.8; do
	[ -e "$root/$f" ] && ok "installed: $f" || ko "not installed: $f"
done
[ ! -e "$root/sbin/exsctl" ] && ok "exsctl is not in sbin (any user may run it)" || ko "exsctl in sbin"
[ -f "$stage$etc/exs.conf" ] && ok "the example becomes $etc/exs.conf where there was none" ||
	ko "no $etc/exs.conf" "$tmp/log1"

echo "# the admin's edit" >>"$stage$etc/exs.conf"
cp "$stage$etc/exs.conf" "$tmp/edited"
DESTDIR=$stage cmake --install "$build" >"$tmp/log2" 2>&1
if cmp -s "$tmp/edited" "$stage$etc/exs.conf" && grep -q "Kept: .*exs.conf" "$tmp/log2"; then
	ok "a second install keeps the edited $etc/exs.conf"
else ko "a second install overwrote $etc/exs.conf" "$tmp/log2"; fi

export PKG_CONFIG_PATH=$root/$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$stage
[ "$(pkg-config --print-requires-private exs | tr '\n' ' ')" = "libibverbs libprotobuf-c " ] &&
	ok "exs.pc: Requires.private libibverbs libprotobuf-c" || ko "exs.pc Requires.private" "$root/$libdir/pkgconfig/exs.pc"

# the installed examples, built as a user would, against the staged install
cp -r "$root/share/doc/exs/examples" "$tmp/ex"
if cmake -S "$tmp/ex" -B "$tmp/ex/build" -DCMAKE_PREFIX_PATH="$root" >"$tmp/log3" 2>&1 &&
	cmake --build "$tmp/ex/build" -j2 >>"$tmp/log3" 2>&1; then
	ok "the installed examples build with find_package(exs) (exs::exs)"
else ko "the examples with find_package(exs)" "$tmp/log3"; fi
# (whole outputs into grep: -q would end the pipe early, and pipefail see it)
if [ -x "$tmp/ex/build/exs-echo-server" ] &&
	readelf -d "$tmp/ex/build/exs-echo-server" | grep -c 'NEEDED.*libexs.so.1' >/dev/null &&
	LD_LIBRARY_PATH=$root/$libdir ldd "$tmp/ex/build/exs-echo-server" | grep -c "$root/$libdir/libexs.so.1" >/dev/null; then
	ok "exs-echo-server links the staged libexs.so.1"
else ko "exs-echo-server does not link the staged libexs"; fi
# shellcheck disable=SC2046
if gcc -Wall -Werror -o "$tmp/sync" "$tmp/ex/echo-sync-implicit.c" $(pkg-config --cflags --libs exs) 2>"$tmp/log4"; then
	ok "an example builds with \$(pkg-config --cflags --libs exs)"
else ko "pkg-config build" "$tmp/log4"; fi

echo "$pass passed, $fail failed"
[ $fail = 0 ] && [ $pass -gt 0 ]
