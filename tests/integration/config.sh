#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# config.sh: exsd as systemd runs it, in one guest. exsd is socket-
# activated by systemd-socket-activate with a configuration file, tells a
# notify socket READY=1, STATUS= and WATCHDOG=1, serves clients through
# the passed socket, and applies the file: socket defaults in libexs,
# ephemeral ports from its range, listener limits, ports below 1024 for
# root and CAP_NET_BIND_SERVICE only; exs_connect's timeout on rxe and siw
# (a deadline gives ETIMEDOUT, NULL waits past connect_timeout_ms). Ends
# with "N passed, N failed".
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
. "$here/exsctl.sh" # X, jcheck, hold, pid_of, until_json, wait_ready
ip=$EXS_VM_RXE_IP
conf=$LOGS/exs.conf
notify=$LOGS/notify.sock
cat >"$conf" <<CONF
[daemon]
log_level = debug
[ports]
ephemeral = 40000-40002
[sockets]
credits = 7
sp_max = 100
[limits]
max_listeners_per_client = 2
connect_timeout_ms = 5000
CONF

# ---- socket activation and the notify protocol
timeout 300 "$B/tests/notify_listen" "$notify" 290 >"$LOGS/notify.log" 2>&1 &
NOTIFY_PID=$!
mkdir -p /run/exs
for _ in $(seq 50); do [ -S "$notify" ] && break; sleep 0.1; done
systemd-socket-activate --seqpacket -l /run/exs/exsd.sock -E NOTIFY_SOCKET="$notify" \
	-E WATCHDOG_USEC=400000 "$B/exsd" -c "$conf" >"$LOGS/exsd-act.log" 2>&1 &
EXSD_PID=$! # it execs exsd in its own process
# like systemd, it starts exsd on the first connection; SocketMode=0666
wait_for "$LOGS/exsd-act.log" 'Listening on /run/exs/exsd.sock' 20 || fail "systemd-socket-activate"
chmod 0666 /run/exs/exsd.sock
if ! grep -q '^READY=1$' "$LOGS/notify.log"; then pass "exsd not started before a client came"; else
	fail "exsd started before a client came"; fi
j=$LOGS/j.json
X -j config >$j
jcheck "exsctl config (the first client, through the passed socket): the file's values" \
	'(map({(.key): .value}) | add) as $c | $c["sockets.credits"] == "7" and
	 $c["ports.ephemeral"] == "40000-40002" and $c["limits.max_listeners_per_client"] == "2" and
	 $c["daemon.log_level"] == "debug"' $j
if wait_for "$LOGS/notify.log" '^READY=1$' 10; then pass "exsd tells NOTIFY_SOCKET READY=1"
else fail "no READY=1"; cat "$LOGS/notify.log" "$LOGS/exsd-act.log" | sed 's/^/    /'; fi
wait_for "$LOGS/notify.log" '^STATUS=serving 0 clients, 0 connections$' 5 &&
	pass "STATUS=serving 0 clients, 0 connections" || fail "no first STATUS="
wait_for "$LOGS/notify.log" '^WATCHDOG=1$' 5 && pass "WATCHDOG=1 keep-alives at WATCHDOG_USEC/2" ||
	fail "no WATCHDOG=1"
grep -q 'control socket from systemd' "$LOGS/exsd-act.log" &&
	pass "exsd serves the socket systemd passed" || fail "exsd did not take the passed socket"
grep -q 'config \[ports\] ephemeral=40000-40002' "$LOGS/exsd-act.log" &&
	pass "the effective configuration is logged at start" || fail "no config log line"

# ---- what the file does to clients
out=$(timeout 30 "$B/tests/exs_conf" defaults 2>&1)
[ "$out" = "credits=7 sp_max=100" ] && pass "a new socket starts with exsd's defaults ($out)" ||
	fail "socket defaults: $out"
out=$(EXS_SOCKET=/run/exs/none.sock timeout 30 "$B/tests/exs_conf" defaults 2>&1)
[ "$out" = "credits=32 sp_max=1024" ] && pass "without exsd: libexs's built-in defaults ($out)" ||
	fail "built-in defaults: $out"

# three ephemeral ports, then EADDRNOTAVAIL
timeout 60 "$B/tests/exs_conf" bind "$ip" 0 4 >"$LOGS/eph.out" 2>&1 &
p=$(pid_of eph)
if [ "$(grep -c ': ok$' "$LOGS/eph.out")" = 3 ] && grep -q "^bind 3: error 99 " "$LOGS/eph.out"; then
	pass "bind port 0: three ports of 40000-40002, the fourth EADDRNOTAVAIL"
else fail "ephemeral binds"; sed 's/^/    /' "$LOGS/eph.out"; fi
X -j ports >$j
jcheck "exsctl ports: the bound ports are 40000, 40001, 40002" \
	"map(select(.pid == $p) | .local_port) | sort == [40000, 40001, 40002]" $j
kill "$p" 2>/dev/null
until_json 'map(select(.local_port >= 40000 and .local_port <= 40002)) | length == 0' ports ||
	fail "the ephemeral ports were not released"

# an unbound connect takes its port from the range too; the defaults negotiate
HOLDS=()
hold csrv server "$ip" 7611 -n 2 -z 100
pid_of csrv >/dev/null
hold ccli client "$ip" 7611 -n 2 -z 100
wait_ready csrv
wait_ready ccli
X -j conns >$j
jcheck "an unbound connect gets a port of the range; both sides use 7 credits" \
	'length == 2 and (map(select(.local_port != 7611))[0].local_port | . >= 40000 and . <= 40002) and
	 all(.credits == 7)' $j
wait_for "$LOGS/notify.log" '^STATUS=serving .* 2 connections$' 5 &&
	pass "STATUS follows: 2 connections" || { fail "STATUS did not follow"; tail -n 3 "$LOGS/notify.log"; }
kill "${HOLDS[@]}" 2>/dev/null
wait "${HOLDS[@]}" 2>/dev/null

# two listeners per client, the third ENOBUFS
timeout 60 "$B/tests/exs_conf" bind "$ip" 0 3 listen >"$LOGS/lis.out" 2>&1 &
p=$(pid_of lis)
if [ "$(grep -c ': ok$' "$LOGS/lis.out")" = 2 ] && grep -q "^bind 2: error 105 " "$LOGS/lis.out"; then
	pass "max_listeners_per_client = 2: the third exs_listen fails with ENOBUFS"
else fail "listener limit"; sed 's/^/    /' "$LOGS/lis.out"; fi
kill "$p" 2>/dev/null

# ports below 1024: root, CAP_NET_BIND_SERVICE, and nobody else
low() { # NAME WANT [setpriv args...]
	local name=$1 want=$2
	shift 2
	timeout 30 "$@" "$B/tests/exs_conf" bind "$ip" 999 1 >"$LOGS/low.out" 2>&1 &
	local p=$!
	wait_for "$LOGS/low.out" "^ready" 20
	kill "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	grep -q "^bind 0: $want" "$LOGS/low.out" && pass "port 999 for $name: $want" ||
		{ fail "port 999 for $name"; sed 's/^/    /' "$LOGS/low.out"; }
}
low root ok
low nobody "error 13 " setpriv --reuid=65534 --regid=65534 --clear-groups
low "nobody with CAP_NET_BIND_SERVICE" ok setpriv --reuid=65534 --regid=65534 --clear-groups \
	--inh-caps=+net_bind_service --ambient-caps=+net_bind_service

# ---- exs_connect's timeout (connect_timeout_ms = 5000 above), on both devices
for dev in rxe siw; do
	cip=$EXS_VM_RXE_IP port=7620
	[ $dev = siw ] && cip=$EXS_VM_SIW_IP port=7630
	# a listener that never accepts: the request waits in its backlog
	timeout 120 "$B/tests/exs_conf" bind "$cip" $port 1 listen >"$LOGS/q-$dev.out" 2>&1 &
	p=$(pid_of q-$dev)
	X -j listeners >$j
	jcheck "$dev: the listener is up" "map(select(.local_port == $port)) | length == 1" $j
	out=$(timeout 30 "$B/tests/exs_conf" connect "$cip" $port 2000 2>&1)
	t=${out##* }
	if [[ $out == "connect: error 110 "* ]] && [ "$t" -ge 1900 ] && [ "$t" -le 3000 ]; then
		pass "$dev: a 2 s timeout on a queued connect gives ETIMEDOUT after $t ms"
	else fail "$dev: 2 s timeout: $out"; fi
	if until_json "map(select(.peer_port == $port or .local_port == $port)) | length == 0" conns
	then pass "$dev: the timed-out connect leaves no connection in exsd"
	else fail "$dev: exsd still holds the timed-out connect"; jq -c '.[]' $LOGS/poll.json | sed 's/^/    /'; fi
	until_json "map(select(.local_port == $port)) | length == 1 and .[0].pending == 0" \
		listeners && pass "$dev: nor a pending request on the listener" ||
		{ fail "$dev: the listener still counts a request"; sed 's/^/    /' $LOGS/poll.json
		  sed 's/^/    /' "$LOGS/q-$dev.out"; grep -i "cm event\|failed\|request" "$LOGS/exsd-act.log" | tail -n 8 | sed 's/^/    /'; }
	kill "$p" 2>/dev/null
	# NULL waits past connect_timeout_ms and connects when the server accepts
	# (siw's MPA exchange itself gives up after about 10 s: accept before)
	late=12000
	[ $dev = siw ] && late=8500
	timeout 60 "$B/tests/exs_conf" accept "$cip" $((port + 1)) $late >"$LOGS/late-$dev.out" 2>&1 &
	p=$(pid_of late-$dev)
	out=$(timeout 50 "$B/tests/exs_conf" connect "$cip" $((port + 1)) -1 2>&1)
	t=${out##* }
	if [[ $out == "connect: ok "* ]] && [ "$t" -ge 5500 ]; then
		pass "$dev: a NULL timeout waits past connect_timeout_ms (5 s): connected after $t ms"
	else fail "$dev: NULL timeout: $out"; sed 's/^/    /' "$LOGS/late-$dev.out"; fi
	wait_for "$LOGS/late-$dev.out" "accept: ok" 10 && pass "$dev: the late accept takes it" ||
		{ fail "$dev: late accept"; sed 's/^/    /' "$LOGS/late-$dev.out"; }
	kill "$p" 2>/dev/null
done

stop_exsd activated
sleep 0.3
grep -q '^STOPPING=1$' "$LOGS/notify.log" && pass "STOPPING=1 on SIGTERM" || fail "no STOPPING=1"
kill "$NOTIFY_PID" 2>/dev/null
summary
