#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# scale.sh: issue 12's 10,000 connections on one host. SCALE_PROCS pairs of
# exs_many per device (a server that accepts SCALE_PER connections, a
# client that makes them, SCALE_WINDOW connects in flight each), on rxe0
# and siw0 at once, through one exsd. It prints and checks:
#   - the time until every connection is established on both ends;
#   - exsd's VmRSS and descriptors, before and with them, per connection;
#   - libexs's VmRSS per idle connection end (the clients' and servers');
#   - the median one-way latency of 1-byte ping-pongs (exs-perf, defaults;
#     the middle of 3 runs) on one more rxe0 connection among them all,
#     against the same with none: at most 1.1 x;
#   - then SCALE_SECS of checked ping-pongs on every connection, all
#     closed, and exsd's descriptors back where they were.
# Run by `ctest -R vm_scale` (label long) in a guest of 10 GiB.
set -u
. "$(dirname "$0")/lib.sh"
T=$B/tests
PER=${SCALE_PER:-1000}
PROCS=${SCALE_PROCS:-5}
WINDOW=${SCALE_WINDOW:-50}
SECS=${SCALE_SECS:-60}
TOTAL=$((PER * PROCS * 2))
t_start=$(date +%s)

echo "vm_scale: $TOTAL connections: $PROCS processes x $PER on each of $EXS_VM_RXE_DEV and" \
	"$EXS_VM_SIW_DEV, $WINDOW connects in flight per process, then $SECS s of traffic"
# siw counts pinned memory even for root; thousands of set-ups under TCG
# outlast connect_timeout_ms's 30 s; one uid holds both ends of all
ulimit -l unlimited
start_exsd_conf scale <<CONF
[limits]
connect_timeout_ms = 600000
max_sockets_per_uid = $((TOTAL * 2 + 1000))
max_ports_per_uid = 65536
CONF

# pingpong1 TAG: the median one-way µs of 3,000 1-byte round trips on rxe0
pingpong1() {
	local so=$LOGS/pp-$1.server co=$LOGS/pp-$1.client sp
	timeout 300 "$B/exs-perf" -p 18600 -s 1 -n 3000 pingpong >"$so" 2>&1 &
	sp=$!
	if ! wait_for "$so" ready 30; then
		tail -n 3 "$so" | sed 's/^/    server: /' >&2
		return 1
	fi
	timeout 300 "$B/exs-perf" -p 18600 -C -s 1 -n 3000 pingpong "$EXS_VM_RXE_IP" >"$co" 2>&1 ||
		tail -n 3 "$co" "$so" | sed 's/^/    /' >&2
	wait $sp
	awk -F, 'NR == 2 { print $13 }' "$co"
}
# pingpong TAG: 3 runs of pingpong1 (a run's median moves by up to 20 %
# from one to the next under TCG); sets PP to their median, PP_ALL to all
pingpong() {
	local k v=()
	PP="" PP_ALL=""
	for k in 1 2 3; do v+=("$(pingpong1 "$1-$k")"); done
	PP_ALL="${v[*]}"
	[ ${#v[@]} = 3 ] && [ -n "${v[0]}" ] && [ -n "${v[1]}" ] && [ -n "${v[2]}" ] || return 1
	PP=$(printf '%s\n' "${v[@]}" | sort -g | sed -n 2p)
}

pingpong alone
lat0=$PP
echo "    ping-pong on $EXS_VM_RXE_DEV, no other connection: median ${lat0:-?} us one way (runs: $PP_ALL)"
warm_up
rss0=$(rss $EXSD_PID) fds0=$(nfds $EXSD_PID)
echo "    exsd before: VmRSS $rss0 kB, $fds0 fds"

declare -A spid cpid
BG_TIMEOUT=$((SECS + 3000))
port=7900
for t in rxe siw; do
	for i in $(seq "$PROCS"); do
		port=$((port + 1))
		bg scale-s-$t$i "$T/exs_many" server "$(dev_ip $t)" $port "$PER" "$SECS"
		spid[$t$i]=$BG_PID
		wait_for "$LOGS/scale-s-$t$i.out" listening 30 || fail "$t server $i did not listen"
	done
done
t0=$(date +%s)
port=7900
for t in rxe siw; do
	for i in $(seq "$PROCS"); do
		port=$((port + 1))
		bg scale-c-$t$i "$T/exs_many" client "$(dev_ip $t)" $port "$PER" "$SECS" "$WINDOW"
		cpid[$t$i]=$BG_PID
	done
done
ok=1
for t in rxe siw; do
	for i in $(seq "$PROCS"); do
		if ! wait_for "$LOGS/scale-c-$t$i.out" "^ready" 2400 || ! wait_for "$LOGS/scale-s-$t$i.out" "^ready" 120 ||
			! grep -q "^ready $PER of $PER" "$LOGS/scale-c-$t$i.out" "$LOGS/scale-s-$t$i.out"; then
			fail "$t pair $i: $PER connections not all up"
			sed 's/^connect event [0-9]*: //' "$LOGS/scale-c-$t$i.out" "$LOGS/scale-s-$t$i.out" | sort |
				uniq -c | sort -rn | head -n 5 | sed 's/^/    /'
			ok=0
		fi
	done
done
dt=$(($(date +%s) - t0))
if [ $ok = 1 ]; then
	pass "$TOTAL connections established ($((TOTAL / 2)) on $EXS_VM_RXE_DEV, $((TOTAL / 2)) on" \
		"$EXS_VM_SIW_DEV) in $dt s"
else
	grep -v "established on" "$LOGS/exsd-scale.log" | tail -n 20 | sed 's/^/    exsd: /'
	stop_bgs
	kill $EXSD_PID
	summary
	exit 1
fi

rss1=$(rss $EXSD_PID) fds1=$(nfds $EXSD_PID)
echo "    exsd with them: VmRSS $rss1 kB, $fds1 fds; guest $(sed -n 's/^MemAvailable: *//p' /proc/meminfo) available"
per_conn=$(((rss1 - rss0) * 1024 / TOTAL))
echo "    exsd: $per_conn bytes of VmRSS per connection (both ends), $((fds1 - fds0)) more fds"
[ $((fds1 - fds0)) -le $((PROCS * 4 + 8)) ] &&
	pass "exsd's descriptors do not grow with connections: $fds0 -> $fds1 for $((PROCS * 4)) processes" ||
	fail "exsd holds $fds1 fds with $TOTAL connections (before: $fds0)"
[ "$per_conn" -le 16384 ] && pass "exsd: $per_conn bytes per connection (at most 16 KiB)" ||
	fail "exsd: $per_conn bytes per connection"
for t in rxe siw; do
	c=0 s=0
	for i in $(seq "$PROCS"); do
		c=$((c + $(rss "$(child ${cpid[$t$i]})") + 0))
		s=$((s + $(rss "$(child ${spid[$t$i]})") + 0))
	done
	echo "    libexs on $t: clients $((c / PROCS)) kB, servers $((s / PROCS)) kB of VmRSS per process:" \
		"$((c * 1024 / PROCS / PER)) and $((s * 1024 / PROCS / PER)) bytes per idle connection end"
done

pingpong among
lat1=$PP
echo "    ping-pong on $EXS_VM_RXE_DEV among $TOTAL idle connections: median ${lat1:-?} us one way (runs: $PP_ALL)"
if [ -n "$lat0" ] && [ -n "$lat1" ] && awk -v a="$lat0" -v b="$lat1" 'BEGIN { exit !(b <= 1.1 * a) }'; then
	pass "one connection among $TOTAL idle ones: $lat1 us against $lat0 us alone (at most 1.1 x)"
else
	fail "one connection among $TOTAL idle ones: ${lat1:-?} us against ${lat0:-?} us alone (more than 1.1 x)"
fi

# the clients start together; every connection ping-pongs, every echo checked
for t in rxe siw; do
	for i in $(seq "$PROCS"); do kill -USR1 "$(child ${cpid[$t$i]})"; done
done
for t in rxe siw; do
	bad=0 rounds=""
	for i in $(seq "$PROCS"); do
		wait "${cpid[$t$i]}" || { rc=$?; bad=1; echo "    $t client $i: exit $rc"; }
		wait "${spid[$t$i]}" || { rc=$?; bad=1; echo "    $t server $i: exit $rc"; }
		rounds="$rounds $(sed -n 's/^traffic: [0-9]* connections, \([0-9]*\) rounds.*/\1/p' "$LOGS/scale-c-$t$i.out")"
		[ $bad = 0 ] || tail -n 3 "$LOGS/scale-c-$t$i.out" "$LOGS/scale-s-$t$i.out" | sed 's/^/    /'
	done
	[ $bad = 0 ] && pass "$t: $((PROCS * PER)) connections, ${rounds# } rounds of ping-pongs on each in $SECS s," \
		"every echo intact, all closed" || fail "$t: traffic on $((PROCS * PER)) connections"
done
BGS=()
end=$(($(date +%s) + 60))
until [ "$(nfds $EXSD_PID)" -le "$fds0" ] || [ "$(date +%s)" -ge $end ]; do sleep 1; done
[ "$(nfds $EXSD_PID)" -le "$fds0" ] && pass "exsd back to $fds0 fds after the $TOTAL connections closed" ||
	fail "exsd holds $(nfds $EXSD_PID) fds after the connections closed (before: $fds0)"
echo "    exsd after: VmRSS $(rss $EXSD_PID) kB, $(nfds $EXSD_PID) fds"
kill $EXSD_PID
wait $EXSD_PID
echo "vm_scale took $(($(date +%s) - t_start)) s"
summary
