#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# deb.sh build DIR SRC: on the host, build the Debian packages of the tree
#   SRC with `dpkg-buildpackage -b -us -uc` (in a copy: it writes into the
#   tree and its parent) and leave the .debs in DIR.
# deb.sh guest DIR: in an exs-vm guest, install them with dpkg, check what
#   went where, run a transfer over rxe0 and siw0 with the installed exsd,
#   exs-perf and exsctl, build the installed examples against libexs-dev
#   and run one, and check that /etc/exs.conf is a conffile dpkg keeps.
set -u
mode=${1:?build|guest} dir=${2:?DIR}
if [ "$mode" = build ]; then
	src=$(cd "${3:?SRC}" && pwd) || exit 1
	rm -rf "$dir" && mkdir -p "$dir/exs" || exit 1
	if git -C "$src" rev-parse 2>/dev/null; then
		git -C "$src" ls-files -co --exclude-standard -z | (cd "$src" && tar --null -T - -cf -) | tar -xf - -C "$dir/exs"
	else
		tar -C "$src" --exclude='./build*' --exclude=./obj-* -cf - . | tar -xf - -C "$dir/exs"
	fi || exit 1
	t0=$(date +%s)
	(cd "$dir/exs" && dpkg-buildpackage -b -us -uc) >"$dir/build.log" 2>&1 || {
		tail -n 40 "$dir/build.log"; echo "FAIL dpkg-buildpackage"; exit 1; }
	grep "building package" "$dir/build.log"
	echo "dpkg-buildpackage: $(($(date +%s) - t0)) s"
	exit 0
fi

export EXS_BUILD=$dir
. "$(dirname "$0")/lib.sh"
ver=$(dpkg-deb -f "$dir"/exsd_*.deb Version)
# man-db's trigger would rebuild the whole man index (minutes under TCG);
# this is the guest's throw-away overlay, not the host
rm -f /var/lib/man-db/auto-update
debs=()
for p in libexs1 libexs-dev exsd exs-tools; do debs+=("$dir/${p}_${ver}_amd64.deb"); done
if dpkg -i "${debs[@]}" >"$LOGS/dpkg.log" 2>&1; then pass "dpkg -i libexs1 libexs-dev exsd exs-tools ($ver)"
else fail "dpkg -i"; sed 's/^/    /' "$LOGS/dpkg.log"; summary; exit 1; fi
for f in /usr/lib/x86_64-linux-gnu/libexs.so.1 /usr/include/exs.h /usr/lib/x86_64-linux-gnu/cmake/exs/exsConfig.cmake \
	/usr/sbin/exsd /lib/systemd/system/exsd.socket /lib/systemd/system/exsd.service /etc/exs.conf \
	/usr/bin/exsctl /usr/bin/exs-perf /usr/share/doc/exs-tools/examples/CMakeLists.txt; do
	[ -e "$f" ] && pass "installed: $f" || fail "not installed: $f"
done
dpkg-query -W -f='${Conffiles}\n' exsd | grep -q '^ /etc/exs.conf ' && pass "/etc/exs.conf is a conffile of exsd" ||
	fail "/etc/exs.conf is no conffile"
[ "$(/usr/sbin/exsd --version)" = "exsd (EXS) $ver" ] && pass "exsd --version: $ver" || fail "exsd --version"

# an admin's edit survives reinstalling the package, and exsd uses it
sed -i 's/^#* *credits *=.*/credits = 12/' /etc/exs.conf
grep -q '^credits = 12$' /etc/exs.conf || printf '[sockets]\ncredits = 12\n' >>/etc/exs.conf
cp /etc/exs.conf "$LOGS/edited.conf"
dpkg -i "$dir/exsd_${ver}_amd64.deb" >"$LOGS/dpkg2.log" 2>&1 &&
	cmp -s /etc/exs.conf "$LOGS/edited.conf" && pass "dpkg -i exsd again keeps the edited /etc/exs.conf" ||
	{ fail "reinstalling exsd changed /etc/exs.conf"; sed 's/^/    /' "$LOGS/dpkg2.log"; }

/usr/sbin/exsd >"$LOGS/exsd-deb.log" 2>&1 &
EXSD_PID=$!
wait_for "$LOGS/exsd-deb.log" "serving on" 20 && pass "the installed exsd serves" ||
	{ fail "the installed exsd did not start"; sed 's/^/    /' "$LOGS/exsd-deb.log"; }
timeout 20 exsctl -j config >"$LOGS/config.json"
jq -e 'map(select(.key == "sockets.credits"))[0].value == "12"' "$LOGS/config.json" >/dev/null &&
	pass "exsctl config: exsd runs with /etc/exs.conf (credits 12)" || fail "exsd does not use /etc/exs.conf"

ulimit -l unlimited # siw counts registered memory against it, even for root
for t in rxe siw; do
	if [ $t = rxe ]; then ip=$EXS_VM_RXE_IP dev=$EXS_VM_RXE_DEV; else ip=$EXS_VM_SIW_IP dev=$EXS_VM_SIW_DEV; fi
	timeout 120 exs-perf -p 18800 -s 1,65536,1048576 -d 1,4 -n 100 -c blast >"$LOGS/perf-s-$t" 2>&1 &
	spid=$!
	timeout 120 exs-perf -p 18800 -s 1,65536,1048576 -d 1,4 -n 100 -c blast "$ip" >"$LOGS/perf-c-$t" 2>&1
	crc=$?
	wait $spid
	src=$?
	[ $crc = 0 ] && [ $src = 0 ] && pass "installed exs-perf blast -c (every byte checked) on $dev" ||
		fail "installed exs-perf on $dev: client $crc, server $src"
	sed 's/^/    /' "$LOGS/perf-c-$t" "$LOGS/perf-s-$t"
done

# the installed examples, built as a user would against libexs-dev
rm -rf /tmp/ex && cp -r /usr/share/doc/exs-tools/examples /tmp/ex
if cmake -S /tmp/ex -B /tmp/ex/build >"$LOGS/ex.log" 2>&1 && cmake --build /tmp/ex/build -j2 >>"$LOGS/ex.log" 2>&1; then
	pass "the installed examples build with find_package(exs)"
else fail "the installed examples do not build"; tail -n 20 "$LOGS/ex.log" | sed 's/^/    /'; fi
timeout 60 /tmp/ex/build/exs-echo-server -n 1 "$EXS_VM_RXE_IP" 7490 >"$LOGS/echo-s" 2>&1 &
spid=$!
wait_for "$LOGS/echo-s" listening 30 || fail "exs-echo-server did not listen"
timeout 60 /tmp/ex/build/echo-sync-explicit "$EXS_VM_RXE_IP" 7490 >"$LOGS/echo-c" 2>&1
crc=$?
wait $spid
if [ $crc = 0 ] && grep -q OK "$LOGS/echo-c"; then pass "the built echo-sync-explicit against exs-echo-server: $(grep OK "$LOGS/echo-c")"
else fail "the built examples (client $crc)"; sed 's/^/    /' "$LOGS/echo-c" "$LOGS/echo-s"; fi
timeout 20 exsctl -j clients >/dev/null && pass "the installed exsctl (any user: /usr/bin) answers" || fail "exsctl"

kill $EXSD_PID
wait $EXSD_PID && pass "the installed exsd stops cleanly" || fail "exsd exit status"
dpkg -r exs-tools libexs-dev exsd libexs1 >"$LOGS/dpkg-r.log" 2>&1 && [ ! -e /usr/sbin/exsd ] &&
	cmp -s /etc/exs.conf "$LOGS/edited.conf" && pass "dpkg -r: the programs go, the edited /etc/exs.conf stays" ||
	{ fail "dpkg -r"; sed 's/^/    /' "$LOGS/dpkg-r.log"; }
summary
