#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# ThreadSanitizer over libexs and exsd (an EXS_TSAN build only, as vm_tsan;
# `tests/run-all --long` runs it): exs_race (exs_close from one thread
# while another's exs_bind/exs_listen waits for exsd) and an exs_xfer pair,
# on rxe and on siw; then the conformance suite (conform.sh), the examples
# (examples.sh) and exs_stress for 60 s per device (stress.sh), each with
# its own exsd, all built with TSan. The progress thread runs beside the
# application threads everywhere. Any report fails: TSan's exit code 66
# fails the program, and every log of the run (applications and exsd's)
# is searched for one at the end. Under TSan the programs run several
# times slower: EXS_SLOW=3 gives conform.sh's and examples.sh's programs 3
# times their usual timeouts (no check's own timing changes).
set -u
. "$(dirname "$0")/lib.sh"
# tsan.supp: the reports that are no bug of libexs or exsd, each with why
export TSAN_OPTIONS="halt_on_error=0 exitcode=66 second_deadlock_stack=1 suppressions=$(cd "$(dirname "$0")" && pwd)/tsan.supp"
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

# part NAME SCRIPT [VAR=VAL...]: another guest script under this build
part() {
	local name=$1 script=$2 t0 rc
	shift 2
	t0=$(date +%s)
	env EXS_SLOW=3 "$@" "$(dirname "$0")/$script" >"$LOGS/part-$name.out" 2>&1
	rc=$?
	sed "s/^/    [$name] /" "$LOGS/part-$name.out"
	if [ $rc = 0 ]; then
		pass "tsan: $name ($(tail -n 1 "$LOGS/part-$name.out"), $(($(date +%s) - t0)) s)"
	else
		fail "tsan: $name: exit $rc after $(($(date +%s) - t0)) s"
	fi
}
part conform conform.sh
part examples examples.sh
part stress stress.sh EXS_STRESS_SECS=60

# every process's output: the applications' and each exsd's log
reports=$(grep -l "WARNING: ThreadSanitizer" "$LOGS"/* 2>/dev/null)
if [ -n "$reports" ]; then
	for f in $reports; do
		echo "---- $f: $(grep -c "WARNING: ThreadSanitizer" "$f") reports"
		grep -A30 "WARNING: ThreadSanitizer" "$f" | head -n 90
	done
	fail "tsan: reports in $(echo $reports | wc -w) logs"
else
	pass "tsan: no report in any of the $(ls "$LOGS" | wc -l) logs (applications and exsd)"
fi
summary
