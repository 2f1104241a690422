#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# exsd as a system daemon, on one guest: clients that lie about their QP,
# break the control protocol, race for ports, open many connections at
# once, lack privilege or die mid-transfer. After each attack exsd must
# still serve everyone else. Run by `ctest -R vm_daemon` through tests/vm/exs-vm.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lock.sh"
T=$B/tests
LOG=$LOGS/exsd-daemon.log
X() { timeout 20 "$B/exsctl" "$@"; }

# run NAME CMD...: pass if CMD exits 0; its output indented below
run() {
	local name=$1 out rc
	shift
	out=$(timeout 120 "$@" 2>&1)
	rc=$?
	if [ $rc = 0 ]; then pass "$name"; else fail "$name (exit $rc)"; fi
	echo "$out" | sed 's/^/    /'
}


# pid_in NAME: the pid a test program printed ("pid N")
pid_in() { sed -n 's/.*pid \([0-9]*\).*/\1/p' "$LOGS/$1.out" | head -n 1; }

# served WHAT: exsd lives, answers exsctl and carries a real transfer
SERVED_PORT=7600
served() {
	local so=$LOGS/served.server co=$LOGS/served.client spid crc
	SERVED_PORT=$((SERVED_PORT + 1))
	if ! kill -0 "$EXSD_PID" 2>/dev/null || ! X clients >/dev/null; then
		fail "exsd still serving after $1: exsd is gone or does not answer"
		return
	fi
	timeout 60 "$T/exs_xfer" server "$EXS_VM_RXE_IP" $SERVED_PORT -n 4 -M 65536 >"$so" 2>&1 &
	spid=$!
	wait_for "$so" listening 20
	timeout 60 "$T/exs_xfer" client "$EXS_VM_RXE_IP" $SERVED_PORT -n 4 -M 65536 >"$co" 2>&1
	crc=$?
	if wait $spid && [ $crc = 0 ]; then pass "exsd still serving after $1"; else
		fail "exsd still serving after $1: transfer failed"; sed 's/^/    /' "$so" "$co"
	fi
}

# qp_of PID DEV: the number of an RC QP that process PID created on DEV
qp_of() {
	rdma -j res show qp link "$2/1" | jq -r '.[] | select(.type == "RC") | "\(.lqpn) \(.pid // 0)"' |
		while read -r qpn tid; do
			[ "$tid" != 0 ] && [ -d "/proc/$1/task/$tid" ] && { echo "$qpn"; break; }
		done
}

t_start=$(date +%s%N)
start_exsd daemon || { fail "exsd start"; summary; exit 1; }

# ---- a. QP ownership: a client may have only its own QPs brokered
for t in rxe siw; do
	if [ $t = rxe ]; then ip=$EXS_VM_RXE_IP dev=$EXS_VM_RXE_DEV; else ip=$EXS_VM_SIW_IP dev=$EXS_VM_SIW_DEV; fi
	bg hs-$t "$T/exs_hold" server "$ip" 7610 -n 2
	wait_for "$LOGS/hs-$t.out" listening 30
	bg hc-$t "$T/exs_hold" client "$ip" 7610 -n 2
	wait_for "$LOGS/hs-$t.out" ready 60 && wait_for "$LOGS/hc-$t.out" ready 60
	owner=$(pid_in hs-$t)
	qpn=$(qp_of "$owner" "$dev")
	if [ -z "$qpn" ]; then
		fail "a: no QP of exs_hold (pid $owner) on $dev"; rdma res show qp; continue
	fi
	echo "    exs_hold server pid $owner owns QP $qpn on $dev"
	# exsd's kernel query on its own, in both forms: one QP, and a dump
	for port in 1 0; do
		out=$(timeout 20 "$T/exs_qpowner" "$dev" "$qpn" $port 2>"$LOGS/qpowner.err")
		tid=${out#owner }
		if [ "$tid" != "$out" ] && [ "$tid" -gt 0 ] && [ -d "/proc/$owner/task/$tid" ]; then
			pass "a: qp_owner($dev, port $port, QP $qpn): thread $tid of process $owner"
		else
			fail "a: qp_owner($dev, port $port, QP $qpn): $out"
		fi
	done
	for port in 1 0; do
		out=$(timeout 20 "$T/exs_qpowner" "$dev" 0xfffff0 $port 2>"$LOGS/qpowner.err")
		if [ "$out" = "error 2 (No such file or directory)" ]; then
			pass "a: qp_owner($dev, port $port, QP 0xfffff0): ENOENT"
		else
			fail "a: qp_owner($dev, port $port, QP 0xfffff0): $out"
		fi
	done
	run "a: connect naming QP $qpn of pid $owner on $dev: refused with EPERM" \
		"$T/exs_ctlraw" foreign-connect "$ip" 7619 "$qpn"
	if grep -q "QP $qpn on $dev belongs to pid [0-9]* (process $owner), not to the client: refused" "$LOG"; then
		pass "a: exsd logged the refusal, naming the client, QP $qpn and owner $owner"
	else
		fail "a: no refusal naming QP $qpn and process $owner in exsd's log"
	fi
	grep "QP $qpn on $dev" "$LOG" | sed 's/^/    /'
	# passive side: the request is rejected, the connecting peer sees ECONNREFUSED
	bg fa-$t "$T/exs_ctlraw" foreign-accept "$ip" 7611 "$qpn" 2
	fa=$BG_PID
	wait_for "$LOGS/fa-$t.out" listening 30
	run "a: accepting with QP $qpn of pid $owner on $dev: the peer is refused" \
		"$T/exs_errors" refused "$ip" 7611
	if wait $fa; then pass "a: both accepts naming QP $qpn on $dev got EPERM"; else
		fail "a: accepts naming QP $qpn on $dev"; fi
	sed 's/^/    /' "$LOGS/fa-$t.out"
	run "a: connect offering QP $qpn of pid $owner early (Connect.early) on $dev: refused with EPERM" \
		"$T/exs_ctlraw" foreign-early "$ip" 7619 "$qpn"
	if grep -q "sock 8: QP $qpn given early" "$LOG" &&
	   grep -q "sock 8: QP $qpn on $dev belongs to pid [0-9]* (process $owner), not to the client: refused" "$LOG"; then
		pass "a: exsd took the early QP $qpn on $dev and refused it, naming its owner $owner"
	else
		fail "a: no early QP $qpn taken and refused in exsd's log"
	fi
	run "a: connect naming a QP that does not exist on $dev: refused with EPERM" \
		"$T/exs_ctlraw" foreign-connect "$ip" 7619 0xfffff0
	if grep -q "sock 7: QP 16777200 on $dev does not exist: refused" "$LOG"; then
		pass "a: exsd logged the refusal of QP 16777200 on $dev: it does not exist"
	else
		fail "a: no refusal of the QP that does not exist in exsd's log"
	fi
	run "a: connect with a QP of its own on $dev passes the check (ECONNREFUSED: nobody listens)" \
		"$T/exs_ctlraw" own-connect "$ip" 7619
	# the holders' connection was brokered with the check on and still works
	kill -USR1 "$(pid_in hc-$t)"
	if wait_for "$LOGS/hc-$t.out" "closed ok" 20; then pass "a: legit exs_hold connection on $dev closed cleanly"; else
		fail "a: legit exs_hold connection on $dev"; sed 's/^/    /' "$LOGS/hs-$t.out" "$LOGS/hc-$t.out"; fi
	stop_bgs
done
served "the QP ownership checks"

# ---- b. malformed and misplaced messages, one client each
for k in truncated oversized garbage version order hello-twice not-request empty unknown-sock big-addr; do
	run "b: malformed/misplaced message '$k': error reply and/or disconnect" "$T/exs_ctlraw" bad $k
	if X -j clients >$LOGS/clients.json && jq -e 'all(.comm != "exs_ctlraw")' $LOGS/clients.json >/dev/null; then
		pass "b: after '$k' exsd answers exsctl and the bad client is gone"
	else
		fail "b: after '$k': exsctl clients"; cat $LOGS/clients.json 2>/dev/null | head -c 600
	fi
done
served "ten malformed or misplaced messages"

# ---- c. two clients racing for one port: exactly one wins each time
run "c: two control connections bind one port at once, 50 rounds: one EADDRINUSE each" \
	"$T/exs_ctlraw" bind-race "$EXS_VM_RXE_IP" 7620 50
for round in 1 2 3 4 5; do
	port=$((7680 + round))
	bg pa$round "$T/exs_port" "$EXS_VM_RXE_IP" $port hold
	pa=$BG_PID
	bg pb$round "$T/exs_port" "$EXS_VM_RXE_IP" $port hold
	pb=$BG_PID
	wait_for "$LOGS/pa$round.out" "bound\|error" 30
	wait_for "$LOGS/pb$round.out" "bound\|error" 30
	res=$(cat "$LOGS/pa$round.out" "$LOGS/pb$round.out" | sort | tr '\n' ';')
	if [ "$res" = "bound $port;error 98 (Address already in use);" ]; then
		pass "c: two processes bind port $port at once: one bound, one EADDRINUSE"
	else
		fail "c: two processes bind port $port at once: $res"
	fi
	stop_bgs
done

# ---- d. 200 concurrent connects from 4 processes: 200 distinct local ports
bg many-s "$T/exs_many" server "$EXS_VM_RXE_IP" 7630 200
wait_for "$LOGS/many-s.out" listening 30
t0=$(date +%s%N)
for i in 1 2 3 4; do bg many-c$i "$T/exs_many" client "$EXS_VM_RXE_IP" 7630 50; done
ok=1
for n in many-s many-c1 many-c2 many-c3 many-c4; do
	wait_for "$LOGS/$n.out" "ready" 240 || ok=0
	grep -q "ready \([0-9]*\) of \1$" "$LOGS/$n.out" || ok=0
done
echo "    200 connections up in $((($(date +%s%N) - t0) / 1000000)) ms"
if [ $ok = 1 ]; then pass "d: 200 concurrent connects all established"; else
	fail "d: 200 concurrent connects"; tail -n 3 "$LOGS"/many-*.out | sed 's/^/    /'; fi
X -j conns >$LOGS/conns.json
if jq -e '[.[] | select(.peer_port == 7630)] | length == 200 and (map(.local_port) | unique | length) == 200
	  and all(.local_port > 0)' $LOGS/conns.json >/dev/null; then
	pass "d: exsctl lists 200 client connections with 200 distinct local ports"
else
	fail "d: local ports of the 200 connections"
	jq -c '[.[] | select(.peer_port == 7630) | .local_port] | {n: length, distinct: (unique | length)}' \
		$LOGS/conns.json | sed 's/^/    /'
fi
stop_bgs
served "200 concurrent connections"

# ---- e. an unprivileged client may not bind a port below 1024
nobody() { setpriv --reuid=nobody --regid=nogroup --clear-groups "$@"; }
out=$(nobody timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 999 2>&1)
if [ "$out" = "error 13 (Permission denied)" ]; then pass "e: nobody binding port 999: EACCES"; else
	fail "e: nobody binding port 999: $out"; fi
out=$(nobody timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 1999 2>&1)
if [ "$out" = "bound 1999" ]; then pass "e: nobody binding port 1999: bound"; else
	fail "e: nobody binding port 1999: $out"; fi
out=$(timeout 30 "$T/exs_port" "$EXS_VM_RXE_IP" 999 2>&1)
if [ "$out" = "bound 999" ]; then pass "e: root binding port 999: bound"; else
	fail "e: root binding port 999: $out"; fi

# ---- f. kill -9 of a sender mid-transfer
for t in rxe siw; do
	if [ $t = rxe ]; then ip=$EXS_VM_RXE_IP; else ip=$EXS_VM_SIW_IP; fi
	bg sink-$t "$T/exs_reset" sink "$ip" 7640 16 65536
	sink=$BG_PID
	wait_for "$LOGS/sink-$t.out" listening 30
	# the victim runs without timeout(1): it is the one killed
	"$T/exs_reset" source "$ip" 7640 7641 65536 >"$LOGS/src-$t.out" 2>&1 &
	victim=$!
	if ! wait_for "$LOGS/sink-$t.out" receiving 60 || ! wait_for "$LOGS/src-$t.out" "sending pid" 5; then
		fail "f: no transfer on $t"; sed 's/^/    /' "$LOGS/sink-$t.out" "$LOGS/src-$t.out"
		kill -9 $victim; stop_bgs; continue
	fi
	sleep 0.5
	t0=$(date +%s%N)
	kill -9 $victim
	wait $victim 2>/dev/null
	wait $sink
	rc=$?
	read -r first last <<<"$(sed -n 's/.* first \([0-9]*\) last \([0-9]*\).*/\1 \2/p' "$LOGS/sink-$t.out")"
	first=${first:-0} last=${last:-0}
	ms_first=$(((first - t0) / 1000000)) ms_last=$(((last - t0) / 1000000))
	tail -n 1 "$LOGS/sink-$t.out" | sed 's/^/    /'
	echo "    kill -9 -> first ECONNRESET ${ms_first} ms, last ${ms_last} ms"
	# at once on both devices: exsd tells the peer on this host that the
	# process is gone (before, on rxe the peer's libexs asked the dead QP
	# in-band and failed after its 1 s probe: about 1050 ms here)
	if [ $rc = 0 ] && [ $first -gt $t0 ] && [ $ms_last -le 500 ]; then
		pass "f: $t: all 16 pending receives failed with ECONNRESET ${ms_first}-${ms_last} ms after kill -9"
	else
		fail "f: $t: pending receives after kill -9 (exit $rc, ${ms_first}-${ms_last} ms)"
	fi
	gone=0
	for _ in $(seq 20); do
		X -j conns >$LOGS/conns.json && jq -e 'all(.local_port != 7641)' $LOGS/conns.json >/dev/null && { gone=1; break; }
		sleep 0.1
	done
	if [ $gone = 1 ]; then pass "f: $t: exsctl no longer lists the killed client's port 7641"; else
		fail "f: $t: exsctl still lists port 7641"; fi
	run "f: $t: the killed client's port 7641 can be bound again" "$T/exs_port" "$ip" 7641
	stop_bgs
done
served "kill -9 of clients mid-transfer"

# the kernel answered every ownership question that exsd asked
if grep -q "cannot ask the kernel" "$LOG"; then
	fail "exsd could not ask the kernel about some QPs"; grep "cannot ask the kernel" "$LOG" | head -n 5
else
	pass "the kernel answered every QP ownership question"
fi
echo "    $(grep -c 'established on' "$LOG") connections established;" \
	"$(grep -c 'single query failed' "$LOG") ownership questions fell back to a dump"
# ---- g. one exsd per control socket
lock_tests

stop_exsd daemon
echo "daemon.sh took $((($(date +%s%N) - t_start) / 1000000)) ms"
if [ $FAIL != 0 ]; then
	echo "---- exsd log (tail)"
	tail -n 60 "$LOG"
fi
summary
