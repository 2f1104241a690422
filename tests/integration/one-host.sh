#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Integration tests on one guest: the real exsd and real EXS programs over
# rxe0 (RoCE) and siw0 (iWARP). Run by `ctest` through tests/vm/exs-vm.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/exsctl.sh"

# xfer NAME IP PORT DEV ARGS...: one server and one client, both must pass
xfer() {
	local name=$1 ip=$2 port=$3 dev=$4
	shift 4
	local so=$LOGS/$name.server co=$LOGS/$name.client
	timeout 300 "$B/tests/exs_xfer" server "$ip" "$port" "$@" >"$so" 2>&1 &
	local spid=$!
	if ! wait_for "$so" listening 30; then
		kill $spid 2>/dev/null
		fail "$name: server did not listen"; sed 's/^/    /' "$so"
		return
	fi
	timeout 300 "$B/tests/exs_xfer" client "$ip" "$port" "$@" >"$co" 2>&1
	local crc=$?
	wait $spid
	local src=$?
	if [ $crc = 0 ] && [ $src = 0 ]; then
		pass "$name on $dev ($(transport_of "$dev"))"
	else
		fail "$name on $dev: client exit $crc, server exit $src"
	fi
	sed 's/^/    /' "$so" "$co"
}

# perf NAME DEV IP ARGS...: an exs-perf pair (the client retries until the
# server listens); both must exit 0, and with -c every byte was checked
perf() {
	local name=$1 dev=$2 ip=$3
	shift 3
	timeout 240 "$B/exs-perf" -p 18700 "$@" >"$LOGS/$name.server" 2>&1 &
	local spid=$!
	timeout 240 "$B/exs-perf" -p 18700 "$@" "$ip" >"$LOGS/$name.client" 2>&1
	local crc=$?
	wait $spid
	local src=$?
	if [ $crc = 0 ] && [ $src = 0 ]; then pass "$name on $dev"; else fail "$name on $dev: client $crc, server $src"; fi
	sed 's/^/    /' "$LOGS/$name.client" "$LOGS/$name.server"
}

start_exsd one || { fail "exsd start"; summary; exit 1; }
for t in rxe siw; do
	if [ $t = rxe ]; then ip=$EXS_VM_RXE_IP dev=$EXS_VM_RXE_DEV; else ip=$EXS_VM_SIW_IP dev=$EXS_VM_SIW_DEV; fi
	xfer "seqpacket-1000-random-1B-1MiB-$t" "$ip" 7471 "$dev" -n 1000 -M 1048576 -s 11
	xfer "seqpacket-unregistered-$t" "$ip" 7472 "$dev" -n 200 -M 262144 -s 12 -u
	xfer "stream-$t" "$ip" 7473 "$dev" -n 300 -M 1048576 -s 13 -t stream
	perf "exs-perf blast -c (checked), 1 B to 1 MiB, 1 and 4 in flight, $t" "$dev" "$ip" \
		-s 1,4096,1048576 -d 1,4 -B 4M -c blast
	perf "exs-perf pingpong -c, $t" "$dev" "$ip" -s 1,4096 -n 200 -c pingpong
	# rxe's max_msg_sz is 8 MiB: a 16 MiB message goes as two writes
	[ $t = rxe ] && perf "exs-perf blast -c, 16 MiB messages, $t" "$dev" "$ip" -s 16M -d 1 -n 4 -c blast
	# 40 connections opened and closed back to back: fds are reused at
	# once, while exsd may still report on the connection that had one
	perf "exs-perf connect x40 (fd reuse), $t" "$dev" "$ip" -n 40 connect
	if out=$(timeout 60 "$B/tests/exs_errors" refused "$ip" 7999 2>&1); then
		pass "connect to a closed port on $dev gives ECONNREFUSED"
	else
		fail "connect to a closed port on $dev"
	fi
	echo "$out" | sed 's/^/    /'
done
# Connect.early: a connect offers exsd the QP of the device its process
# was routed to last. AABBA (A on rxe, B on siw): exsd takes it for the
# second A and the second B; for the first B and the last A the route leads
# elsewhere, exsd sends Route, and libexs builds there and drops the early QP
mark=$(wc -l <"$LOGS/exsd-one.log")
bg early-s "$B/tests/exs_early" server "$EXS_VM_RXE_IP" "$EXS_VM_SIW_IP" 7480 5
es=$BG_PID
if wait_for "$LOGS/early-s.out" listening 30 &&
   timeout 120 "$B/tests/exs_early" client "$EXS_VM_RXE_IP" "$EXS_VM_SIW_IP" 7480 AABBA \
	>"$LOGS/early-c.out" 2>&1 && wait $es; then
	pass "connects alternating between rxe and siw in one process: every message intact"
else
	fail "connects alternating between rxe and siw in one process"
	sed 's/^/    /' "$LOGS/early-s.out"
fi
sed 's/^/    /' "$LOGS/early-c.out"
taken=$(tail -n +$((mark + 1)) "$LOGS/exsd-one.log" | grep -c 'given early$')
moved=$(tail -n +$((mark + 1)) "$LOGS/exsd-one.log" | grep -c 'given early, the route is')
if [ "$taken" -ge 1 ] && [ "$moved" -ge 1 ]; then
	pass "early QPs: exsd took $taken, and $moved routed elsewhere were replaced (2 and 2 expected)"
else
	fail "early QPs: exsd took $taken, and replaced $moved routed elsewhere (2 and 2 expected)"
fi
stop_bgs
# exs_close from another thread while exs_bind/exs_listen wait for exsd's
# reply (the library lock is released then): the close is deferred, the
# call fails with EBADF, exsd gets the socket back (the same port binds
# again next round), and under ASan nothing is used after free
if out=$(timeout 120 "$B/tests/exs_race" "$EXS_VM_RXE_IP" 7600 400 2>&1); then
	pass "exs_close racing exs_bind/exs_listen: no use after free, no leaked binding"
else
	fail "exs_close racing exs_bind/exs_listen"
fi
echo "$out" | tail -n 20 | sed 's/^/    /'
exsctl_tests
stop_exsd one
if out=$("$B/exsctl" conns 2>&1); then
	fail "exsctl without exsd succeeded"
else
	pass "exsctl without exsd: non-zero exit and a clear message"
fi
echo "    $out"

# no exsd at all: the first call that needs it fails at once with ENETDOWN
if out=$(EXS_SOCKET=/run/exs/none.sock timeout 20 "$B/tests/exs_errors" noexsd "$EXS_VM_RXE_IP" 7471 2>&1); then
	pass "no exsd running: ENETDOWN, no hang"
else
	fail "no exsd running"
fi
echo "$out" | sed 's/^/    /'

if [ $FAIL != 0 ]; then
	echo "---- exsd log (tail)"
	tail -n 40 "$LOGS"/exsd-one.log
fi
summary
