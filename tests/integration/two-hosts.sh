#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Integration tests across two guests ("hosts" a and b, each with its own
# exsd), joined by virtio-net links: rxe0 on one, siw0 on the other.
# Guest b serves, guest a connects. Run by `ctest` through tests/vm/exs-vm -p.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sendfile-hosts.sh"
role=${1:?a or b}

start_exsd "$role" || { fail "exsd start on $role"; summary; exit 1; }
if [ "$role" = b ]; then
	timeout 400 "$B/tests/exs_xfer" server "$EXS_VM_RXE_IP" 7471 -n 1000 -M 1048576 -s 21 >$LOGS/rxe.server 2>&1 &
	r=$!
	timeout 400 "$B/tests/exs_xfer" server "$EXS_VM_SIW_IP" 7472 -n 1000 -M 1048576 -s 22 >$LOGS/siw.server 2>&1 &
	s=$!
	# exsd restart: a's exsd sees the CM disconnect; a's libexs must ask
	# this side in-band (PING/PONG) and keep the RoCE connection
	timeout 400 "$B/tests/exs_xfer" server "$EXS_VM_RXE_IP" 7473 -n 8000 -M 65536 -t stream -s 23 >$LOGS/restart.server 2>&1 &
	x=$!
	# exs_sendmsg with more elements (40) than either device gathers in one
	# RDMA write (rxe 32, siw 6): split into several writes, every byte checked
	timeout 400 "$B/tests/exs_xfer" server "$EXS_VM_RXE_IP" 7477 -n 200 -M 1048576 -s 24 -g 40 >$LOGS/sg-rxe.server 2>&1 &
	gr=$!
	timeout 400 "$B/tests/exs_xfer" server "$EXS_VM_SIW_IP" 7478 -n 200 -M 1048576 -s 25 -g 40 >$LOGS/sg-siw.server 2>&1 &
	gs=$!
	# seed §4.2: the simulation shares its records by a persistent send
	timeout 400 "$B/tests/exs_sim" server "$EXS_VM_RXE_IP" 7475 -t 4 >$LOGS/sim-rxe.server 2>&1 &
	sr=$!
	timeout 400 "$B/tests/exs_sim" server "$EXS_VM_SIW_IP" 7476 -t 4 >$LOGS/sim-siw.server 2>&1 &
	ss=$!
	wait $r && pass "server on $EXS_VM_RXE_DEV ($(transport_of "$EXS_VM_RXE_DEV"))" || fail "server on rxe"
	sed 's/^/    /' $LOGS/rxe.server
	wait $s && pass "server on $EXS_VM_SIW_DEV ($(transport_of "$EXS_VM_SIW_DEV"))" || fail "server on siw"
	sed 's/^/    /' $LOGS/siw.server
	if wait_for $LOGS/restart.server connected 300; then
		sleep 0.5
		kill -0 $x 2>/dev/null || fail "b: the restart transfer ended before exsd was killed"
		kill -9 "$EXSD_PID"
		wait "$EXSD_PID" 2>/dev/null
		sleep 0.5
		start_exsd b-restarted || { fail "exsd restart on b"; summary; exit 1; }
		timeout 100 "$B/tests/exs_xfer" server "$EXS_VM_RXE_IP" 7474 -n 20 >$LOGS/after.server 2>&1 &
		y=$!
		wait $x && pass "b: rxe stream intact across b's exsd restart (SIGKILL)" || fail "b: stream across the restart"
		wait $y && pass "b: a new connection after the restart" || fail "b: no connection after the restart"
		sed 's/^/    /' $LOGS/restart.server $LOGS/after.server
	else
		fail "b: the restart transfer never connected"
		kill $x 2>/dev/null
	fi
	wait $gr && pass "b: gathered sends over $EXS_VM_RXE_DEV" || fail "b: gathered sends over rxe"
	sed 's/^/    /' $LOGS/sg-rxe.server
	wait $gs && pass "b: gathered sends over $EXS_VM_SIW_DEV" || fail "b: gathered sends over siw"
	sed 's/^/    /' $LOGS/sg-siw.server
	wait $sr && pass "b: simulation over $EXS_VM_RXE_DEV (persistent send, cancelled)" || fail "b: simulation over rxe"
	sed 's/^/    /' $LOGS/sim-rxe.server
	wait $ss && pass "b: simulation over $EXS_VM_SIW_DEV (persistent send, cancelled)" || fail "b: simulation over siw"
	sed 's/^/    /' $LOGS/sim-siw.server
	# exs_sendfile of a sparse 64 MiB file (vm_sendfile_long: 1.25 GiB)
	sendfile_hosts b $((64 << 20)) 7480
	sleep 1
	stop_exsd "$role"
	[ $FAIL != 0 ] && tail -n 30 $LOGS/exsd-b.log
	summary
	exit
fi

# guest a: the peer may still be booting; clients retry refused connects
for t in rxe siw; do
	if [ $t = rxe ]; then peer=$EXS_VM_RXE_PEER dev=$EXS_VM_RXE_DEV port=7471 seed=21
	else peer=$EXS_VM_SIW_PEER dev=$EXS_VM_SIW_DEV port=7472 seed=22; fi
	if timeout 400 "$B/tests/exs_xfer" client "$peer" $port -n 1000 -M 1048576 -s $seed -r 90 >$LOGS/$t.client 2>&1; then
		pass "two hosts, seqpacket-1000-random-1B-1MiB over $dev ($(transport_of "$dev"))"
	else
		fail "two hosts over $dev"
	fi
	sed 's/^/    /' $LOGS/$t.client
	if out=$(timeout 60 "$B/tests/exs_errors" refused "$peer" 7999 2>&1); then
		pass "two hosts: connect to a closed port on $dev gives ECONNREFUSED"
	else
		fail "two hosts: closed port on $dev"
	fi
	echo "$out" | sed 's/^/    /'
done
# exs_sendmsg in 40 elements both ways, more than the device gathers in
# one RDMA write: the library splits them, never refuses
for t in rxe siw; do
	if [ $t = rxe ]; then peer=$EXS_VM_RXE_PEER dev=$EXS_VM_RXE_DEV port=7477 seed=24
	else peer=$EXS_VM_SIW_PEER dev=$EXS_VM_SIW_DEV port=7478 seed=25; fi
	if timeout 400 "$B/tests/exs_xfer" client "$peer" $port -n 200 -M 1048576 -s $seed -g 40 -r 90 >$LOGS/sg-$t.client 2>&1 &&
		awk '/elements per send/ { ok = $2 + 0 > $(NF - 3) + 0 } END { exit !ok }' $LOGS/sg-$t.client; then
		pass "two hosts, exs_sendmsg of 40 elements over $dev ($(grep -o 'gathers [0-9]* per' $LOGS/sg-$t.client))"
	else
		fail "two hosts, exs_sendmsg beyond the SGE limit over $dev"
	fi
	sed 's/^/    /' $LOGS/sg-$t.client
done
# seed §4.2: b's simulation shares its records by a persistent send; a
# samples them with exs_recv_offset (torn samples counted, not failed)
for t in rxe siw; do
	if [ $t = rxe ]; then peer=$EXS_VM_RXE_PEER dev=$EXS_VM_RXE_DEV port=7475
	else peer=$EXS_VM_SIW_PEER dev=$EXS_VM_SIW_DEV port=7476; fi
	if timeout 120 "$B/tests/exs_sim" client "$peer" $port -t 4 -r 90 >$LOGS/sim-$t.client 2>&1; then
		pass "two hosts, display samples the simulation over $dev ($(transport_of "$dev")): $(grep -o '[0-9]* torn ([0-9.]*%)' $LOGS/sim-$t.client)"
	else
		fail "two hosts, simulation display over $dev"
	fi
	sed 's/^/    /' $LOGS/sim-$t.client
done
# b kills and restarts its exsd during this transfer (see above)
if timeout 400 "$B/tests/exs_xfer" client "$EXS_VM_RXE_PEER" 7473 -n 8000 -M 65536 -t stream -s 23 -r 90 >$LOGS/restart.client 2>&1; then
	pass "two hosts: rxe stream intact while b's exsd was killed and restarted"
else
	fail "two hosts: rxe stream across b's exsd restart"
fi
sed 's/^/    /' $LOGS/restart.client
grep -E "disconnect|DISCONNECT" $LOGS/exsd-a.log | tail -n 3 | sed 's/^/    a: /'
if timeout 100 "$B/tests/exs_xfer" client "$EXS_VM_RXE_PEER" 7474 -n 20 -r 60 >$LOGS/after.client 2>&1; then
	pass "two hosts: a new connection to b after its exsd restarted"
else
	fail "two hosts: no new connection after b's restart"
fi
sed 's/^/    /' $LOGS/after.client
sendfile_hosts a $((64 << 20)) 7480
stop_exsd "$role"
[ $FAIL != 0 ] && tail -n 30 $LOGS/exsd-a.log
summary
