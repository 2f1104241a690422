#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# exs_stress (tests/apps/exs_stress.c) on rxe and on siw, one run of
# $EXS_STRESS_SECS seconds each (default 150): 8 threads sending,
# receiving, cancelling, closing, reconnecting and deleting queues on
# shared sockets; every operation must complete exactly once with a
# documented errno, and no thread may stall for 60 s. Run by
# `tests/run-all --long` as vm_stress (about 6 minutes); tsan.sh runs it
# too, shorter, under ThreadSanitizer.
set -u
. "$(dirname "$0")/lib.sh"
SECS=${EXS_STRESS_SECS:-150}
ulimit -l unlimited # siw counts registered pages against RLIMIT_MEMLOCK

# stress_on DEV IP PORT SECS: pass/fail on exit 0 and the summary line
stress_on() {
	local dev=$1 ip=$2 port=$3 secs=$4 t0 rc out=$LOGS/stress-$1.out
	t0=$(date +%s)
	timeout $((secs + 240)) "$B/tests/exs_stress" -t 8 -d "$secs" -w 60 "$ip" "$port" >"$out" 2>&1
	rc=$?
	sed "s/^/    [$dev] /" "$out" | head -n 60
	if [ $rc = 0 ] && grep -q "^exs_stress: .* 0 bad$" "$out"; then
		pass "exs_stress on $dev: $secs s, 8 threads, $(($(date +%s) - t0)) s in all"
	else
		fail "exs_stress on $dev: exit $rc (3: a hang, 124: timeout)"
		grep -B12 -m 2 -E "connection failed|error" "$LOGS"/exsd-stress.log | head -n 60
	fi
}

start_exsd stress || { fail "exsd start"; summary; exit 1; }
stress_on rxe "$EXS_VM_RXE_IP" 7700 "$SECS"
stress_on siw "$EXS_VM_SIW_IP" 7710 "$SECS"
stop_exsd stress
summary
