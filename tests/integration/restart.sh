#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# exsd killed with SIGKILL and restarted while a connection streams data,
# on one host: on rxe0 (RoCE) the QPs live in the applications, so the
# stream must finish intact; on siw0 (iWARP) the connection belongs to
# exsd's CM endpoint, so both ends must see ECONNRESET promptly. While exsd
# is down, calls that need it fail with ENETDOWN; after the restart, new
# connections work, the new exsd lists the RoCE connection (libexs made it
# known) and sees its close, and a listener that waited in accept across
# the restart accepts again. Run by ctest through tests/vm/exs-vm.
set -u
. "$(dirname "$0")/lib.sh"

# kill_exsd: SIGKILL, reaped; the stale socket file stays, as after a crash
kill_exsd() {
	kill -9 "$EXSD_PID"
	wait "$EXSD_PID" 2>/dev/null
}

# start_pair NAME IP PORT ARGS...: an exs_xfer server and client, connected
start_pair() {
	local name=$1 ip=$2 port=$3
	shift 3
	timeout 120 "$B/tests/exs_xfer" server "$ip" "$port" "$@" >"$LOGS/$name.server" 2>&1 &
	SPID=$!
	wait_for "$LOGS/$name.server" listening 30 || return 1
	timeout 120 "$B/tests/exs_xfer" client "$ip" "$port" "$@" >"$LOGS/$name.client" 2>&1 &
	CPID=$!
	wait_for "$LOGS/$name.client" connected 30 && wait_for "$LOGS/$name.server" connected 30
}

show() { sed 's/^/    /' "$LOGS/$1.server" "$LOGS/$1.client"; }

# conns_until JQ PORT: `exsctl -j conns port PORT` satisfies JQ within 5 s
conns_until() {
	for _ in $(seq 50); do
		timeout 20 "$B/exsctl" -j conns port "$2" >$LOGS/conns.json 2>&1
		jq -e "$1" $LOGS/conns.json >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	return 1
}

# a fresh short transfer: exsd serves new connections again
fresh() {
	local name=$1 ip=$2 port=$3
	if start_pair "$name" "$ip" "$port" -n 20 -M 65536 && wait $CPID && wait $SPID; then
		pass "$name: a new connection after the restart"
	else
		fail "$name: no new connection after the restart"
		show "$name"
	fi
}

# ---- rxe0: the stream survives
start_exsd restart-rxe-1 || exit 1
if start_pair rxe-restart "$EXS_VM_RXE_IP" 7601 -n 8000 -M 65536 -t stream; then
	sleep 0.3
	if kill -0 $CPID 2>/dev/null && kill -0 $SPID 2>/dev/null; then
		pass "rxe0: transfer under way when exsd is killed"
	else
		fail "rxe0: the transfer ended before exsd was killed (make it longer)"
	fi
	kill_exsd
	if out=$(timeout 20 "$B/tests/exs_errors" noexsd "$EXS_VM_RXE_IP" 7699 2>&1); then
		pass "exsd down: calls that need it fail at once with ENETDOWN"
	else
		fail "exsd down: not ENETDOWN"
	fi
	echo "$out" | sed 's/^/    /'
	sleep 0.5
	start_exsd restart-rxe-2 || exit 1
	# both ends are made known to the new exsd (Adopt): listed again
	if conns_until 'length == 2 and all(.state == "established" and .device == "rxe0" and .transport == "IB/RoCE")' 7601; then
		pass "rxe0: the new exsd lists both ends of the connection from before its start"
	else
		fail "rxe0: the connection is not listed by the new exsd"; sed 's/^/    /' $LOGS/conns.json
	fi
	wait $CPID; crc=$?
	wait $SPID; src=$?
	if [ $crc = 0 ] && [ $src = 0 ]; then
		pass "rxe0: the stream ran across exsd's restart, every byte checked"
	else
		fail "rxe0: stream broken by the restart: client exit $crc, server exit $src"
	fi
	if conns_until 'length == 0' 7601; then
		pass "rxe0: the adopted connection's close was seen: no longer listed"
	else
		fail "rxe0: the adopted connection is still listed after its close"; sed 's/^/    /' $LOGS/conns.json
	fi
	show rxe-restart
else
	fail "rxe0: transfer did not start"
	show rxe-restart
fi
fresh rxe-after "$EXS_VM_RXE_IP" 7602
stop_exsd restart-rxe-2

# ---- siw0: both ends see ECONNRESET promptly
start_exsd restart-siw-1 || exit 1
if start_pair siw-restart "$EXS_VM_SIW_IP" 7611 -n 8000 -M 65536 -t stream; then
	sleep 0.3
	t0=$(date +%s%N)
	kill_exsd
	wait $CPID; crc=$?
	wait $SPID; src=$?
	ms=$((($(date +%s%N) - t0) / 1000000))
	resets=$(cat "$LOGS/siw-restart.server" "$LOGS/siw-restart.client" | grep -c "Connection reset by peer")
	if [ $crc != 0 ] && [ $src != 0 ] && [ "$resets" = 2 ] && [ $ms -le 2000 ]; then
		pass "siw0: both ends failed with ECONNRESET ${ms} ms after exsd was killed"
	else
		fail "siw0: client exit $crc, server exit $src, $resets ECONNRESET, after ${ms} ms"
	fi
	show siw-restart
else
	fail "siw0: transfer did not start"
	show siw-restart
	kill_exsd
fi
start_exsd restart-siw-2 || exit 1
fresh siw-after "$EXS_VM_SIW_IP" 7612
stop_exsd restart-siw-2

# ---- a listener across the restart: a server waits in exs_accept while
# exsd is killed and started again; libexs lists the listener again with
# the new exsd, at the same address and port, and the waiting accept takes
# the next client (before: it ended with ENETDOWN and the server exited)
listener_survives() { # NAME IP PORT
	local name=$1 ip=$2 port=$3 listed=0 crc src
	start_exsd "$name-1" || return
	timeout 120 "$B/tests/exs_xfer" server "$ip" "$port" -n 20 -M 65536 >"$LOGS/$name.server" 2>&1 &
	SPID=$!
	if ! wait_for "$LOGS/$name.server" listening 30; then
		fail "$name: the server did not listen"
		kill_exsd
		return
	fi
	kill_exsd
	sleep 0.5
	start_exsd "$name-2" || return
	# libexs retries while exsd is away, at most a second apart
	for _ in $(seq 50); do
		if timeout 20 "$B/exsctl" -j listeners 2>/dev/null | jq -e "any(.[]; .local_port == $port)" >/dev/null; then
			listed=1
			break
		fi
		sleep 0.1
	done
	timeout 60 "$B/tests/exs_xfer" client "$ip" "$port" -n 20 -M 65536 >"$LOGS/$name.client" 2>&1
	crc=$?
	wait $SPID
	src=$?
	if [ $listed = 1 ] && [ $crc = 0 ] && [ $src = 0 ]; then
		pass "$name: the listener was listed again with the new exsd; its waiting accept took a new client, every byte checked"
	else
		fail "$name: listed again: $listed, client exit $crc, server exit $src"
		show "$name"
	fi
	stop_exsd "$name-2"
}
listener_survives listen-rxe "$EXS_VM_RXE_IP" 7621
listener_survives listen-siw "$EXS_VM_SIW_IP" 7622
summary
