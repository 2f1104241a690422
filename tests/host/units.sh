#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# units.sh SRC BUILD: `systemd-analyze verify` on exsd.service and
# exsd.socket must pass without a word. The service is the one CMake
# configured for installing (build/systemd/exsd.service) with one change:
# ExecStart names the built exsd, as verify wants an executable there and
# the installed path does not exist on a build machine. The man: pages the
# units name are looked up in docs/man when man(1) is there.
set -uo pipefail
src=$(cd "${1:?SRC}" && pwd) build=$(cd "${2:?BUILD}" && pwd) || exit 1
command -v systemd-analyze >/dev/null || { echo "units: no systemd-analyze"; echo "0 passed, 1 failed"; exit 1; }
tmp=$(mktemp -d /tmp/exs-units.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
check() { # NAME COMMAND...: passes when COMMAND succeeds and prints nothing
	local out
	out=$("${@:2}" 2>&1)
	if [ $? = 0 ] && [ -z "$out" ]; then
		pass=$((pass + 1)); echo "PASS $1"
	else
		fail=$((fail + 1)); echo "FAIL $1"; printf '%s\n' "$out" | sed 's/^/    /'
	fi
}

grep -q "^ExecStart=/.*/exsd$" "$build/systemd/exsd.service" ||
	{ echo "units: $build/systemd/exsd.service has no absolute ExecStart"; exit 1; }
sed "s|^ExecStart=.*|ExecStart=$build/exsd|" "$build/systemd/exsd.service" >"$tmp/exsd.service"
cp "$src/systemd/exsd.socket" "$tmp/"
man=--man=no
if command -v man >/dev/null; then
	mkdir -p "$tmp/man/man5" "$tmp/man/man8"
	ln -s "$src"/docs/man/*.8 "$tmp/man/man8/"
	ln -s "$src"/docs/man/*.5 "$tmp/man/man5/"
	export MANPATH=$tmp/man
	man=--man=yes
fi
cd "$tmp" || exit 1
check "systemd-analyze verify ($man) exsd.service exsd.socket" \
	systemd-analyze verify "$man" exsd.service exsd.socket
check "exsd.service is Type=notify with a watchdog" \
	grep -qx -e 'WatchdogSec=[0-9]*s' exsd.service
check "exsd.socket listens where libexs looks by default" \
	grep -qx 'ListenSequentialPacket=/run/exs/exsd.sock' exsd.socket
echo "$pass passed, $fail failed"
[ $fail = 0 ]
