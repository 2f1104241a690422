#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# libexs when things run out or go away (issue 14), on one guest: senders
# whose peer or exsd dies mid-transfer end with an errno, not SIGPIPE;
# exs_mregister past RLIMIT_MEMLOCK fails with ENOMEM; an event queue past
# its depth grows and loses nothing; a full socket table gives EMFILE.
# Run by `ctest -R vm_harden` through tests/vm/exs-vm; well under a minute.
set -u
. "$(dirname "$0")/lib.sh"
T=$B/tests
N=24

# ---- a. SIGPIPE: siw transmits from the application's own system calls
sigpipe_round() { # NAME IP PORT KILLEXSD
	local name=$1 ip=$2 port=$3 out
	bg sink-$name "$T/exs_sigpipe" sink "$ip" "$port" $N
	local sink=$BG_PID
	wait_for "$LOGS/sink-$name.out" listening 20
	sink=$(pgrep -P $sink) # the app, not timeout
	bg senders-$name "$T/exs_sigpipe" senders "$ip" "$port" $N
	local senders=$BG_PID
	if ! wait_for "$LOGS/sink-$name.out" "receiving $N" 60; then
		fail "a: $name: $N senders did not all start"
		tail -n 5 "$LOGS/senders-$name.out" "$LOGS/sink-$name.out" | sed 's/^/    /'
		stop_bgs
		return
	fi
	if [ "$4" = yes ]; then
		kill -9 "$EXSD_PID"
		wait "$EXSD_PID" 2>/dev/null
		sleep 0.5
	fi
	kill -9 "$sink"
	wait "$senders"
	local rc=$?
	out=$(grep "^senders" "$LOGS/senders-$name.out")
	echo "    $name: $out"
	grep -v "^sending\|^senders" "$LOGS/senders-$name.out" | sort | uniq -c | sed 's/^/      /'
	if [ $rc = 0 ]; then
		pass "a: $name: $N senders whose peer died ended with an errno, none by SIGPIPE"
	else
		fail "a: $name: ${out:-no summary} (exit $rc)"
		grep -v "^sending\|^send: " "$LOGS/senders-$name.out" | head -n 60 | sed 's/^/    /'
	fi
	stop_bgs
}
start_exsd harden || { fail "exsd start"; summary; exit 1; }
sigpipe_round siw-peer "$EXS_VM_SIW_IP" 7801 no
sigpipe_round rxe-peer "$EXS_VM_RXE_IP" 7802 no
sigpipe_round siw-exsd "$EXS_VM_SIW_IP" 7803 yes
start_exsd harden2 || { fail "exsd restart"; summary; exit 1; }

# ---- b-d. exs_mregister past RLIMIT_MEMLOCK, a queue past its depth, a
# full socket table: each an errno or documented behaviour, no crash
out=$( (ulimit -l 1024 && exec timeout -k 5 60 "$T/exs_exhaust" "$EXS_VM_SIW_IP" 7810) 2>&1)
rc=$?
echo "$out" | sed 's/^/    /'
for c in memlock qdepth emfile; do
	if echo "$out" | grep -q "^PASS $c" && ! echo "$out" | grep -q "^FAIL $c"; then
		pass "$c: $(echo "$out" | grep "^PASS $c" | tail -n 1 | cut -d' ' -f3-)"
	else
		fail "$c (exs_exhaust exit $rc)"
	fi
done
[ $rc = 0 ] || fail "exs_exhaust exit $rc"
stop_exsd harden2

summary
