#!/bin/bash
# Integration tests across two guests ("hosts" a and b, each with its own
# exsd), joined by virtio-net links: rxe0 on one, siw0 on the other.
# Guest b serves, guest a connects. Run by `ctest` through tests/vm/exs-vm -p.
set -u
. "$(dirname "$0")/lib.sh"
role=${1:?a or b}

start_exsd "$role" || { fail "exsd start on $role"; summary; exit 1; }
if [ "$role" = b ]; then
	timeout 400 "$B/tests/exs_xfer" server "$EXS_VM_RXE_IP" 7471 -n 1000 -M 1048576 -s 21 >$LOGS/rxe.server 2>&1 &
	r=$!
	timeout 400 "$B/tests/exs_xfer" server "$EXS_VM_SIW_IP" 7472 -n 1000 -M 1048576 -s 22 >$LOGS/siw.server 2>&1 &
	s=$!
	wait $r && pass "server on $EXS_VM_RXE_DEV ($(transport_of "$EXS_VM_RXE_DEV"))" || fail "server on rxe"
	sed 's/^/    /' $LOGS/rxe.server
	wait $s && pass "server on $EXS_VM_SIW_DEV ($(transport_of "$EXS_VM_SIW_DEV"))" || fail "server on siw"
	sed 's/^/    /' $LOGS/siw.server
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
stop_exsd "$role"
[ $FAIL != 0 ] && tail -n 30 $LOGS/exsd-a.log
summary
