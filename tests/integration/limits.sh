#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# exsd under load and under a hostile local user, on one guest: a process
# with 1,000 connects in flight (a busy client, not a dead one), exsd at its
# descriptor limit (refuses without spinning, serves again), one user's idle
# control connections and port hoarding (root still served), exsd at
# max_clients (refuses at once with its reason, serves again). Run by
# `ctest -R vm_limits` through tests/vm/exs-vm.
set -u
. "$(dirname "$0")/lib.sh"
T=$B/tests
LOG=$LOGS/exsd-limits.log
X() { timeout 20 "$B/exsctl" "$@"; }
# the default run keeps the burst at 200 (minutes of TCG time otherwise);
# `tests/run-all --long` runs it at the issue's 1,000 (EXS_BURST=1000)
BURST=${EXS_BURST:-200}

t_start=$(date +%s%N)

# ---- a. one process, $BURST asynchronous connects on one queue, per device.
# Each SEQPACKET connection pins its receive buffers (about 190 KiB with
# the default sp_max of 1024, exs.7), and siw counts that against
# RLIMIT_MEMLOCK even for root, so the default 8 MiB holds a few dozen:
# the burst runs with the limit lifted, and a lower one must fail
# connects with ENOMEM, not hang.
ulimit -l unlimited
# under TCG, 1,000 set-ups take minutes: more than connect_timeout_ms's 30 s
cat >"$LOGS/burst.conf" <<CONF
[limits]
connect_timeout_ms = 600000
CONF
"$B/exsd" -d -c "$LOGS/burst.conf" >"$LOG" 2>&1 &
EXSD_PID=$!
wait_for "$LOG" "serving on" 10 || { fail "exsd start with burst.conf"; summary; exit 1; }
port=7700
BG_TIMEOUT=900
for t in rxe siw; do
	if [ $t = rxe ]; then ip=$EXS_VM_RXE_IP; else ip=$EXS_VM_SIW_IP; fi
	port=$((port + 1))
	bg burst-s-$t "$T/exs_many" server "$ip" $port $BURST
	wait_for "$LOGS/burst-s-$t.out" listening 30
	t0=$(date +%s%N)
	bg burst-c-$t "$T/exs_many" client "$ip" $port $BURST
	wait_for "$LOGS/burst-c-$t.out" ready 600
	wait_for "$LOGS/burst-s-$t.out" ready 60
	ms=$((($(date +%s%N) - t0) / 1000000))
	c=$(grep -o "ready [0-9]* of [0-9]*" "$LOGS/burst-c-$t.out")
	s=$(grep -o "ready [0-9]* of [0-9]*" "$LOGS/burst-s-$t.out")
	echo "    $t: client $c, server $s, $ms ms"
	grep -v "^ready\|^listening" "$LOGS/burst-c-$t.out" | sed 's/^connect event [0-9]*: //' | sort | uniq -c |
		sort -rn | head -n 5 | sed 's/^/    client: /'
	if [ "$c" = "ready $BURST of $BURST" ] && [ "$s" = "ready $BURST of $BURST" ]; then
		pass "a: $t: $BURST concurrent connects from one process all established ($ms ms)"
	else
		fail "a: $t: $BURST concurrent connects from one process: client '$c', server '$s'"
		tail -n 3 "$LOGS/burst-c-$t.out" "$LOGS/burst-s-$t.out" | sed 's/^/    /'
	fi
	stop_bgs
done
BG_TIMEOUT=300
bg mem-s "$T/exs_many" server "$EXS_VM_SIW_IP" 7710 200
wait_for "$LOGS/mem-s.out" listening 30
(ulimit -l 1024 && exec timeout -k 10 120 "$T/exs_many" client "$EXS_VM_SIW_IP" 7710 200) >"$LOGS/mem-c.out" 2>&1 &
BGS+=($!)
wait_for "$LOGS/mem-c.out" ready 120
up=$(sed -n 's/^ready \([0-9]*\) of 200$/\1/p' "$LOGS/mem-c.out")
errs=$(grep "^connect" "$LOGS/mem-c.out" | sed 's/^connect \(event \)\{0,1\}[0-9]*: //' | sort | uniq -c)
echo "    siw, RLIMIT_MEMLOCK 1 MiB: ${up:-no} of 200 up; failures:"
echo "$errs" | sed 's/^/      /'
if [ -n "$up" ] && [ "$up" -gt 0 ] && [ "$up" -lt 200 ] && ! echo "$errs" | grep -q "Network is down"; then
	pass "a: siw at a 1 MiB RLIMIT_MEMLOCK: $up connects up, the others fail with an errno, no hang"
else
	fail "a: siw at a 1 MiB RLIMIT_MEMLOCK: ${up:-no ready line}"
fi
stop_bgs

# ---- b. a client that sends faster than it reads is slowed down, not dropped
out=$(timeout 60 "$T/exs_crowd" flood 20000 2>&1)
rc=$?
echo "$out" | sed 's/^/    /'
sent=$(echo "$out" | sed -n 's/^sent \([0-9]*\)$/\1/p')
if [ $rc = 0 ] && grep -q "queued, not reading its requests" "$LOG"; then
	pass "b: $sent requests sent unread: exsd paused reading, answered all $sent in order, kept the client"
else
	fail "b: a client flooding requests (exit $rc)"
fi
# one that never reads is dropped once it has taken nothing for 10 s
out=$(timeout 90 "$T/exs_crowd" stall 20000 2>&1)
ms=$(echo "$out" | sed -n 's/^dropped after \([0-9]*\) ms$/\1/p')
echo "$out" | sed 's/^/    /'
if [ -n "$ms" ] && [ "$ms" -ge 7000 ] && [ "$ms" -le 13000 ] && grep -q "took none of its" "$LOG"; then
	pass "b: a client that never reads is dropped ${ms} ms after its last request (stall deadline 10 s)"
else
	fail "b: a client that never reads: ${ms:-not} dropped"
fi
X clients >/dev/null && pass "b: exsd still answers exsctl" || fail "b: exsd does not answer exsctl"
stop_exsd limits

# ---- c. one unprivileged user cannot lock out root or other users
nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
daemon() { setpriv --reuid=daemon --regid=daemon --clear-groups "$@"; }
CONF=$LOGS/limits.conf
cat >"$CONF" <<CONF
[limits]
max_clients = 64
reserved_clients = 8
max_clients_per_uid = 16
max_ports_per_uid = 32
hello_timeout_ms = 3000
CONF
start_exsd_conf() { # NAME PREFIX...: exsd with $CONF, run under PREFIX
	local name=$1
	shift
	"$@" "$B/exsd" -d -c "$CONF" >"$LOGS/exsd-$name.log" 2>&1 &
	EXSD_PID=$!
	wait_for "$LOGS/exsd-$name.log" "serving on" 10
}
start_exsd_conf peruid || { fail "exsd start with $CONF"; cat "$LOGS/exsd-peruid.log"; summary; exit 1; }
LOG=$LOGS/exsd-peruid.log
nobody timeout 30 "$T/exs_crowd" idle 100 10 >"$LOGS/idle.out" 2>&1 &
idle=$!
wait_for "$LOGS/idle.out" kept 10
kept=$(sed -n 's/^kept \([0-9]*\) of 100$/\1/p' "$LOGS/idle.out")
if [ "$kept" = 16 ]; then pass "c: nobody opens 100 idle control connections: exsd keeps 16 (max_clients_per_uid)"; else
	fail "c: nobody's 100 idle control connections: kept ${kept:-?}"; fi
if X clients >/dev/null; then pass "c: root's exsctl is served meanwhile"; else fail "c: root's exsctl refused"; fi
out=$(timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 7750 2>&1)
[ "$out" = "bound 7750" ] && pass "c: root's hello and bind are served meanwhile" || fail "c: root's bind: $out"
out=$(daemon timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 7751 2>&1)
[ "$out" = "bound 7751" ] && pass "c: another user's hello and bind are served meanwhile" || fail "c: user daemon's bind: $out"
wait $idle
tail -n 1 "$LOGS/idle.out" | sed 's/^/    /'
ms=$(sed -n 's/^all closed after \([0-9]*\) ms$/\1/p' "$LOGS/idle.out")
if [ -n "$ms" ] && [ "$ms" -ge 2500 ] && [ "$ms" -le 5000 ]; then
	pass "c: the idle connections are dropped ${ms} ms after they opened (hello_timeout_ms 3000)"
else
	fail "c: idle connections not dropped at the hello deadline: $(tail -n 1 "$LOGS/idle.out")"
fi
# ports: one uid is stopped at max_ports_per_uid with EADDRNOTAVAIL, root is not
# setpriv itself in the background (not the function's subshell): $! is the hoarder
setpriv --reuid=nobody --regid=nogroup --clear-groups timeout 60 "$T/exs_crowd" ports "$EXS_VM_RXE_IP" 1000 \
	>"$LOGS/ports.out" 2>&1 &
hoard=$!
wait_for "$LOGS/ports.out" bound 20
out=$(cat "$LOGS/ports.out")
if [ "$out" = "bound 32, then error 99 (Cannot assign requested address)" ]; then
	pass "c: nobody binding port 0 over and over: 32 ports, then EADDRNOTAVAIL"
else
	fail "c: nobody's port hoard: $out"
fi
out=$(nobody timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 7752 2>&1)
[ "$out" = "error 99 (Cannot assign requested address)" ] && pass "c: nobody's next exs_bind: EADDRNOTAVAIL" ||
	fail "c: nobody's next exs_bind: $out"
out=$(timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 0 2>&1)
[ "$out" = "bound 0" ] && pass "c: root still binds port 0" || fail "c: root's bind to port 0: $out"
out=$(daemon timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 0 2>&1)
[ "$out" = "bound 0" ] && pass "c: another user still binds port 0" || fail "c: user daemon's bind to port 0: $out"
kill $hoard; wait $hoard 2>/dev/null
out=$(nobody timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 7753 2>&1)
[ "$out" = "bound 7753" ] && pass "c: nobody's ports are given back when its client goes" ||
	fail "c: nobody binding after its hoarder left: $out"
stop_exsd peruid

# ---- d. exsd at its descriptor limit: refuses without spinning, serves again
start_exsd_conf fdlimit prlimit --nofile=64:64 || { fail "exsd start under prlimit"; summary; exit 1; }
LOG=$LOGS/exsd-fdlimit.log
bg crowd "$T/exs_crowd" hello 200
crowd=$BG_PID
wait_for "$LOGS/crowd.out" served 60
served=$(sed -n 's/^served \([0-9]*\) of 200$/\1/p' "$LOGS/crowd.out")
cpu() { awk '{ print $14 + $15 }' "/proc/$EXSD_PID/stat"; }
c0=$(cpu); sleep 2; c1=$(cpu)
ticks=$((c1 - c0))
echo "    exsd (RLIMIT_NOFILE 64) served ${served:-?} clients; CPU over 2 s at its limit: $ticks of $((2 * $(getconf CLK_TCK))) ticks"
if [ -n "$served" ] && [ "$served" -lt 64 ] && [ "$served" -gt 20 ]; then
	pass "d: exsd at 64 descriptors serves $served clients, then refuses"
else
	fail "d: exsd at 64 descriptors served ${served:-?} clients"
fi
[ $ticks -le 20 ] && pass "d: exsd does not spin at its descriptor limit ($ticks ticks in 2 s)" ||
	fail "d: exsd spins at its descriptor limit ($ticks ticks in 2 s)"
n=$(grep -c "cannot accept clients" "$LOG")
[ "$n" = 1 ] && pass "d: the refusal is logged once" || fail "d: the refusal is logged $n times"
stop_bgs
if X clients >/dev/null; then pass "d: a new client is served once the others left"; else
	fail "d: no client served after the others left"; fi
grep -q "accepting clients again" "$LOG" && pass "d: exsd logged accepting again" ||
	fail "d: no 'accepting clients again' in the log"
stop_exsd fdlimit

# ---- e. exsd at max_clients (every user): the next client is refused at
# once, exsd's reason reaches exsctl, root keeps its reserved places, and a
# client is served again once one leaves (exs.conf(5) [limits])
cat >"$CONF" <<CONF
[limits]
max_clients = 8
reserved_clients = 2
max_clients_per_uid = 64
CONF
start_exsd_conf maxclients || { fail "exsd start with max_clients 8"; summary; exit 1; }
LOG=$LOGS/exsd-maxclients.log
ms_of() { local t0=$(date +%s%N); out=$("$@" 2>&1); rc=$?; ms=$((($(date +%s%N) - t0) / 1000000)); }
setpriv --reuid=nobody --regid=nogroup --clear-groups timeout 60 "$T/exs_crowd" hello 20 \
	>"$LOGS/crowd-nobody.out" 2>&1 &
crowd_n=$!
wait_for "$LOGS/crowd-nobody.out" served 20
out=$(tr '\n' ' ' <"$LOGS/crowd-nobody.out")
# (the 7th prints exsd's reason only if its Hello was in before the refusal)
case $out in
*"served 6 of 20"*)
	pass "e: nobody's clients: 6 served (max_clients 8 - reserved_clients 2), the 7th refused" ;;
*) fail "e: nobody's clients at max_clients 8, reserved 2: $out" ;;
esac
ms_of nobody timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 7760
[ "$out" = "error 100 (Network is down)" ] && [ $ms -lt 5000 ] &&
	pass "e: nobody's next process: exs_bind fails with ENETDOWN ($ms ms, process start included)" ||
	fail "e: nobody's next process: $out ($ms ms)"
ms_of X clients
[ $rc = 0 ] && pass "e: root's exsctl is served from the reserved places ($ms ms)" || fail "e: root's exsctl: $out"
timeout 60 "$T/exs_crowd" hello 20 >"$LOGS/crowd-root.out" 2>&1 &
crowd_r=$!
wait_for "$LOGS/crowd-root.out" served 20
out=$(tr '\n' ' ' <"$LOGS/crowd-root.out")
case $out in
*"served 2 of 20"*) pass "e: root's clients take the 2 reserved places, then all 8 are used" ;;
*) fail "e: root's clients at max_clients: $out" ;;
esac
ms_of X clients
[ $rc = 1 ] && [ "$out" = "exsctl: exsd: too many clients" ] && [ $ms -lt 5000 ] &&
	pass "e: at max_clients root's exsctl is refused with exsd's reason: '$out' ($ms ms)" ||
	fail "e: exsctl at max_clients: '$out' (exit $rc, $ms ms)"
ms_of timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 7761
[ "$out" = "error 100 (Network is down)" ] && [ $ms -lt 5000 ] &&
	pass "e: root's next process at max_clients: exs_bind fails with ENETDOWN ($ms ms)" ||
	fail "e: root's process at max_clients: $out ($ms ms)"
kill $crowd_r; wait $crowd_r 2>/dev/null
sleep 0.5 # for exsd to see them go
ms_of X clients
[ $rc = 0 ] && pass "e: root's crowd gone: exsctl served again" || fail "e: exsctl after root's crowd left: $out"
ms_of timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 7762
[ "$out" = "bound 7762" ] && pass "e: and root's process binds ($ms ms)" || fail "e: root's bind after: $out"
kill $crowd_n; wait $crowd_n 2>/dev/null
sleep 0.5
ms_of nobody timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 7763
[ "$out" = "bound 7763" ] && pass "e: nobody's crowd gone: nobody's process binds ($ms ms)" ||
	fail "e: nobody's bind after its crowd left: $out"
n=$(grep -c "refusing a client of uid .*: too many clients" "$LOG")
[ "$n" -ge 4 ] && pass "e: exsd logged its $n refusals" || fail "e: exsd logged $n refusals"
stop_exsd maxclients
LOG=$LOGS/exsd-limits.log

echo "limits.sh took $((($(date +%s%N) - t_start) / 1000000)) ms"
if [ $FAIL != 0 ]; then
	echo "---- exsd log (warnings)"
	grep -v "established on\|cm event\| -> \|client [0-9]*: pid" "$LOG" | tail -n 40
fi
summary
