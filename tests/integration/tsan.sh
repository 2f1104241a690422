#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# ThreadSanitizer over libexs and exsd (an EXS_TSAN build only, as vm_tsan):
# exs_race (exs_close from one thread while another's exs_bind/exs_listen
# waits for exsd) and an exs_xfer pair, on rxe and on siw; the progress
# thread runs beside them. Any report fails (TSan's exit code 66).
set -u
. "$(dirname "$0")/lib.sh"
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1"
if ! nm -D "$B/libexs.so" 2>/dev/null | grep -q __tsan_init; then
	fail "$B is not an EXS_TSAN build"
	summary
	exit 1
fi
start_exsd tsan || { fail "exsd start"; summary; exit 1; }
for d in rxe:$EXS_VM_RXE_IP siw:$EXS_VM_SIW_IP; do
	dev=${d%%:*} ip=${d#*:}
	out=$(timeout 300 "$B/tests/exs_race" "$ip" 7600 200 2>&1)
	rc=$?
	echo "$out" | grep -A25 "WARNING: ThreadSanitizer" | head -n 120
	echo "$out" | grep "^exs_race:" | sed 's/^/    /'
	if [ $rc = 0 ]; then pass "tsan: exs_race on $dev"; else fail "tsan: exs_race on $dev: exit $rc"; fi
	bg xs-$dev "$B/tests/exs_xfer" server "$ip" 7610 -n 200 -M 262144 -s 5
	spid=$BG_PID
	wait_for "$LOGS/xs-$dev.out" listening 60
	timeout 300 "$B/tests/exs_xfer" client "$ip" 7610 -n 200 -M 262144 -s 5 > "$LOGS/xc-$dev.out" 2>&1
	crc=$?
	wait $spid
	src=$?
	grep -h -A25 "WARNING: ThreadSanitizer" "$LOGS/xs-$dev.out" "$LOGS/xc-$dev.out" | head -n 80
	grep -h "messages each way" "$LOGS/xs-$dev.out" "$LOGS/xc-$dev.out" | sed 's/^/    /'
	if [ $crc = 0 ] && [ $src = 0 ]; then
		pass "tsan: exs_xfer on $dev"
	else
		fail "tsan: exs_xfer on $dev: client exit $crc, server exit $src"
	fi
done
stop_exsd tsan
if grep -q "WARNING: ThreadSanitizer" "$LOGS/exsd-tsan.log"; then
	grep -A25 "WARNING: ThreadSanitizer" "$LOGS/exsd-tsan.log" | head -n 60
	fail "tsan: exsd reported a race"
else
	pass "tsan: exsd reported no race"
fi
summary
