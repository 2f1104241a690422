#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The example programs (examples/, README "Examples") in one guest. For
# each device (rxe, siw) and socket type (stream, seqpacket) one
# exs-echo-server -n 8 serves the four clients one after another, then
# all four at once. Every client must exit 0 with its "OK" line showing
# every message and byte; the server must exit 0 after 8 clean
# connections with the byte count of all of them. Run by `ctest` through
# tests/vm/exs-vm (vm_examples). EXS_SLOW=N multiplies the programs'
# timeouts (tsan.sh).
set -u
. "$(dirname "$0")/lib.sh"

E=$B/examples
SLOW=${EXS_SLOW:-1}
CLIENTS=(echo-sync-implicit echo-sync-explicit echo-async-implicit echo-async-explicit)
NSIZES=24 ROUND_BYTES=4179948	# examples/common.h: msg_sizes[] and its sum
MOVED=0
T0=$(date +%s.%N)
ulimit -l unlimited	# siw counts registered pages against RLIMIT_MEMLOCK, even for root

# check_client NAME LOG RC ROUNDS TYPE: exit 0 and the exact summary line
check_client() {
	local c=$1 log=$2 rc=$3 rounds=$4 type=$5
	local msgs=$((NSIZES * rounds)) bytes=$((ROUND_BYTES * rounds))
	if [ "$rc" = 0 ] && grep -q "^$c: OK: $msgs messages, $bytes bytes echoed and verified ($type," "$log"; then
		pass "$c ($type, $msgs messages)"
		MOVED=$((MOVED + 2 * bytes))
	else
		fail "$c ($type): exit $rc"
	fi
	sed 's/^/    /' "$log"
}

# serve DEV IP TYPE PORT: one server, 4 clients in turn, then 4 at once
serve() {
	local dev=$1 ip=$2 type=$3 port=$4
	local T=SOCK_${type^^} tag=$dev-$type so=$LOGS/echo-server-$dev-$type.log
	local c i log rc pids=()

	timeout $((600 * SLOW)) "$E/exs-echo-server" -t "$type" -n 8 "$ip" "$port" >"$so" 2>&1 &
	local spid=$!
	if ! wait_for "$so" listening $((30 * SLOW)); then
		kill $spid 2>/dev/null
		fail "exs-echo-server ($tag) did not listen"; sed 's/^/    /' "$so"
		return
	fi
	echo "-- $tag: the four clients one after another"
	for c in "${CLIENTS[@]}"; do
		log=$LOGS/$c-$tag-seq.log
		timeout $((120 * SLOW)) "$E/$c" -t "$type" "$ip" "$port" >"$log" 2>&1
		check_client "$c" "$log" $? 1 "$T"
	done
	echo "-- $tag: the four clients at once, 2 rounds each, async with 8 in flight"
	for c in "${CLIENTS[@]}"; do
		local depth=
		[ "${c#echo-async}" != "$c" ] && depth="-d 8"
		# shellcheck disable=SC2086
		timeout $((180 * SLOW)) "$E/$c" -t "$type" -r 2 $depth "$ip" "$port" >"$LOGS/$c-$tag-par.log" 2>&1 &
		pids+=($!)
	done
	for i in "${!pids[@]}"; do
		c=${CLIENTS[$i]}
		wait "${pids[$i]}"
		check_client "$c" "$LOGS/$c-$tag-par.log" $? 2 "$T"
	done
	wait $spid
	rc=$?
	if [ $rc = 0 ] && grep -q "served 8 connections, $((ROUND_BYTES * 12)) bytes echoed, 0 failed" "$so"; then
		pass "exs-echo-server on $dev ($(transport_of "$dev")), $T: 8 connections, 4 at once"
	else
		fail "exs-echo-server on $dev, $T: exit $rc"
	fi
	sed 's/^/    /' "$so"
}

for t in rxe siw; do
	if [ $t = rxe ]; then ip=$EXS_VM_RXE_IP dev=$EXS_VM_RXE_DEV; else ip=$EXS_VM_SIW_IP dev=$EXS_VM_SIW_DEV; fi
	start_exsd "examples-$t" || { fail "exsd start ($t)"; continue; }
	serve "$dev" "$ip" stream 7481
	serve "$dev" "$ip" seqpacket 7482
	stop_exsd "examples-$t"
done
echo "examples: $MOVED bytes moved (sent and echoed back) in $(awk "BEGIN { printf \"%.1f\", $(date +%s.%N) - $T0 }") s"
if [ $FAIL != 0 ]; then
	echo "---- exsd: errors, then the tail of each log"
	grep -i -E "error|fail|invalid|refused|reject|abort" "$LOGS"/exsd-examples-*.log | head -n 40
	tail -n 30 "$LOGS"/exsd-examples-*.log
fi
summary
