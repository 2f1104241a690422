#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# systemd.sh: exsd installed and run by a real systemd (PID 1), in an
# `exs-vm -s` guest. The project is installed with cmake --install; then
# exsd.socket starts exsd on a client's first call, over rxe0; systemctl
# status shows STATUS=; the journal has exsd's lines at their priorities;
# the watchdog restarts a stopped exsd; systemctl reload rereads the file
# (a bad one changes nothing); a bad file at start fails once, without a
# restart loop; the sandbox holds. Each journal line checked is printed.
# Ends with "N passed, N failed".
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
. "$here/exsctl.sh" # jcheck
ip=$EXS_VM_RXE_IP
j=$LOGS/j.json
export PATH=/usr/local/sbin:/usr/local/bin:$PATH
X() { timeout 20 exsctl "$@"; }

if [ "$(cat /proc/1/comm)" != systemd ]; then
	fail "PID 1 is $(cat /proc/1/comm), not systemd (run under exs-vm -s)"
	summary
	exit
fi
echo "boot: $(systemd-analyze 2>&1 | head -n 1)"
echo "state: $(systemctl is-system-running 2>&1); failed units: $(systemctl list-units --failed --no-legend --plain | awk '{print $1}' | xargs)"

# ---- install, as an admin would
if cmake --install "$B" >"$LOGS/install.log" 2>&1 && systemctl daemon-reload; then
	pass "cmake --install $B, systemctl daemon-reload"
else fail "install"; tail -n 20 "$LOGS/install.log" | sed 's/^/    /'; fi
unit=$(systemctl show -P FragmentPath exsd.service)
exsd_bin=$(systemctl show -P ExecStart exsd.service | sed -n 's/.*path=\([^ ;]*\).*/\1/p')
conf=$("$exsd_bin" --help 2>&1 | grep -o '/[^ ;()]*exs\.conf' | head -n 1)
echo "unit: $unit; exsd: $exsd_bin; configuration: $conf"
[ -n "$conf" ] && [ -x "$exsd_bin" ] || fail "installed exsd or its configuration path not found"

# service PROPERTY: one property of exsd.service
service() { systemctl show -P "$1" exsd.service; }
# state UNIT WANT SECS: wait until UNIT's ActiveState is WANT
state() {
	local i
	for i in $(seq $(($3 * 10))); do
		[ "$(systemctl show -P ActiveState "$1")" = "$2" ] && return 0
		sleep 0.1
	done
	return 1
}
# journal NAME PRIORITY REGEX [SECS]: exsd.service's journal since the
# last mark has a line matching REGEX, every such line at PRIORITY (an ERE);
# the lines are printed with their priority
cursor=
journal() {
	local out i
	for i in $(seq $((${4:-10} * 10))); do
		out=$(journalctl -u exsd.service ${cursor:+--after-cursor="$cursor"} -o json --no-pager |
			jq -r --arg re "$3" 'select((.MESSAGE | type) == "string" and (.MESSAGE | test($re))) |
				"\(.PRIORITY) \(.MESSAGE)"')
		[ -n "$out" ] && break
		sleep 0.1
	done
	if [ -n "$out" ] && ! printf '%s\n' "$out" | grep -qvE "^($2) "; then
		pass "journal: $1"
	else
		fail "journal: $1 (want priority $2, /$3/)"
	fi
	printf '%s\n' "${out:-(no line)}" | sed 's/^\([0-9]\) /    <\1> /'
}
mark() { cursor=$(journalctl -u exsd.service -n 1 -o json --no-pager | jq -r .__CURSOR); }

# ---- socket activation, a transfer over rxe0, STATUS=
systemctl start exsd.socket
if state exsd.socket active 10 && [ "$(service ActiveState)" = inactive ]; then
	pass "systemctl start exsd.socket: listening, exsd.service not started yet"
else fail "exsd.socket $(systemctl show -P ActiveState exsd.socket), exsd.service $(service ActiveState)"; fi
timeout 60 "$B/tests/exs_xfer" server "$ip" 7700 -n 8 -M 65536 >"$LOGS/srv.out" 2>&1 &
srv=$!
sleep 1
timeout 60 "$B/tests/exs_xfer" client "$ip" 7700 -n 8 -M 65536 >"$LOGS/cli.out" 2>&1
crc=$?
wait $srv
src=$?
if [ $crc = 0 ] && [ $src = 0 ]; then pass "exs_xfer over rxe0 ($ip): exsd started by activation"
else fail "exs_xfer: client $crc, server $src"; sed 's/^/    /' "$LOGS/srv.out" "$LOGS/cli.out"; fi
state exsd.service active 5 && pass "exsd.service active (MainPID $(service MainPID))" ||
	fail "exsd.service $(service ActiveState)"
journal "exsd took systemd's socket" 6 'control socket from systemd'
journal "exsd serves, at info" 6 '^serving on /run/exs/exsd.sock'
journal "the connections were set up on rxe0" 6 'established on rxe0'
# a listener: one client (exs_conf waits for SIGTERM, the signal itself)
"$B/tests/exs_conf" bind "$ip" 7701 1 listen >"$LOGS/lis.out" 2>&1 &
HOLD=$!
wait_for "$LOGS/lis.out" '^ready' 20 || { fail "exs_conf listen"; sed 's/^/    /' "$LOGS/lis.out"; }
for _ in $(seq 30); do
	st=$(systemctl status exsd.service --no-pager 2>&1 | grep -m 1 'Status:')
	case $st in *'serving 1 client,'*) break ;; esac
	sleep 0.2
done
echo "    systemctl status: ${st# }"
case $st in *'Status: "serving 1 client, 0 connections"'*) pass "systemctl status exsd shows STATUS=" ;;
*) fail "systemctl status exsd: no STATUS= line for 1 client"; systemctl status exsd.service --no-pager | sed 's/^/    /' ;; esac
kill $HOLD 2>/dev/null
wait $HOLD 2>/dev/null
journalctl -u exsd.service -p notice --no-pager -q | grep -q 'serving on' &&
	fail "journalctl -p notice shows an info line" || pass "journalctl -u exsd -p notice leaves out info lines"

# ---- the hardening (ProtectSystem=strict, PrivateTmp, capabilities)
pid=$(service MainPID)
ro=$(nsenter -t "$pid" -m touch /usr/local/etc/exsd-probe 2>&1)
ro2=$(nsenter -t "$pid" -m touch /var/exsd-probe 2>&1)
if [[ $ro == *"Read-only file system"* ]] && [[ $ro2 == *"Read-only file system"* ]]; then
	pass "exsd's mounts: /usr/local/etc and /var read-only (${ro##*: })"
else fail "exsd can write outside its runtime directory: '$ro' '$ro2'"; fi
if nsenter -t "$pid" -m sh -c 'touch /run/exs/probe && rm /run/exs/probe'; then
	pass "exsd's mounts: its runtime directory /run/exs is writable"
else fail "/run/exs not writable for exsd"; fi
nsenter -t "$pid" -m touch /tmp/exsd-probe 2>/dev/null
[ -e /tmp/exsd-probe ] && fail "exsd's /tmp is the system's" || pass "exsd's /tmp is private"
awk '$5 == "/" {print "    mountinfo: / " $6}' "/proc/$pid/mountinfo"
grep -E '^Cap(Bnd|Eff):' "/proc/$pid/status" | sed 's/^/    /'
grep -qx $'CapBnd:\t0000000000001400' "/proc/$pid/status" &&
	pass "capability bounding set: CAP_NET_BIND_SERVICE and CAP_NET_ADMIN only" ||
	fail "capability bounding set"

# ---- the watchdog restarts a stopped exsd (a drop-in makes it short)
mkdir -p /run/systemd/system/exsd.service.d
printf '[Service]\nWatchdogSec=3s\n' >/run/systemd/system/exsd.service.d/watchdog.conf
systemctl daemon-reload
systemctl restart exsd.service
old=$(service MainPID)
restarts=$(service NRestarts)
mark
kill -STOP "$old"
t0=$(date +%s)
for _ in $(seq 300); do
	new=$(service MainPID)
	[ "$new" != 0 ] && [ "$new" != "$old" ] && [ "$(service ActiveState)" = active ] && break
	sleep 0.1
done
if [ "$new" != 0 ] && [ "$new" != "$old" ] && [ "$(service NRestarts)" -gt "$restarts" ]; then
	pass "watchdog: SIGSTOPped exsd $old replaced by $new after $(($(date +%s) - t0)) s"
else fail "watchdog: MainPID $old -> $new, NRestarts $restarts -> $(service NRestarts)"; fi
journal "systemd's watchdog line" '2|3' 'Watchdog timeout'
journal "exsd's keep-alive interval" 6 'systemd watchdog: a keep-alive every 1500 ms'
X config >/dev/null && pass "the restarted exsd serves" || fail "the restarted exsd does not serve"
rm /run/systemd/system/exsd.service.d/watchdog.conf
systemctl daemon-reload

# ---- systemctl reload: new values for what can change, the socket kept
pid=$(service MainPID)
mark
cat >"$conf" <<CONF
[daemon]
socket = /run/exs/elsewhere.sock
log_level = debug
[ports]
ephemeral = 41000-41009
[sockets]
credits = 9
sp_max = 200
[limits]
max_clients = 50
CONF
systemctl reload exsd.service && pass "systemctl reload exsd" || fail "systemctl reload exsd"
journal "reload: the changes" 5 '^reload: \[(daemon\] log_level|ports\] ephemeral|sockets\] credits|sockets\] sp_max|limits\] max_clients)'
journal "reload: the socket is kept" 5 'socket = /run/exs/elsewhere.sock: cannot change while running, keeping /run/exs/exsd.sock'
journal "reload: done" 5 "^reloaded $conf: 5 settings changed"
state exsd.service active 5
X -j config >$j
jcheck "exsctl config after the reload: the new values, the same socket" \
	'(map({(.key): .value}) | add) as $c | $c["sockets.credits"] == "9" and
	 $c["sockets.sp_max"] == "200" and $c["limits.max_clients"] == "50" and
	 $c["daemon.log_level"] == "debug" and $c["daemon.socket"] == "/run/exs/exsd.sock"' $j
out=$(timeout 30 "$B/tests/exs_conf" defaults 2>&1)
[ "$out" = "credits=9 sp_max=200" ] && pass "a new client's socket starts with the reloaded defaults ($out)" ||
	fail "defaults after reload: $out"
[ "$(service MainPID)" = "$pid" ] && pass "reload kept exsd $pid running" || fail "reload restarted exsd"
# a bind: the port from the new range, in a line only log_level = debug shows
timeout 30 "$B/tests/exs_conf" bind "$ip" 0 1 >"$LOGS/bind.out" 2>&1 &
bpid=$!
wait_for "$LOGS/bind.out" '^ready' 20 || { fail "exs_conf bind"; sed 's/^/    /' "$LOGS/bind.out"; }
journal "reloaded log level and ephemeral range: a debug line, a port of 41000-41009" 7 \
	'^client [0-9]+ sock [0-9]+ bound to port 4100[0-9]$' 5
kill $bpid 2>/dev/null
wait $bpid 2>/dev/null

# a bad file on reload: logged with FILE:LINE, the running configuration stays
mark
printf '[sockets]\ncredits = 12\nbusy_poll_us = soon\n' >"$conf"
systemctl reload exsd.service
journal "bad file on reload: FILE:LINE" 3 "^$conf:3: busy_poll_us: \"soon\" is not a number"
journal "bad file on reload: kept" 3 'keeping the running configuration'
X -j config >$j
jcheck "exsctl config after a bad reload: unchanged" \
	'(map({(.key): .value}) | add) as $c | $c["sockets.credits"] == "9"' $j
[ "$(service MainPID)" = "$pid" ] && [ "$(service ActiveState)" = active ] &&
	pass "exsd runs on after a bad reload" || fail "exsd after a bad reload: $(service ActiveState)"

# ---- a bad file at start: one failure, no restart loop, the socket listens
# (NRestarts counts systemd's own restarts since the last manual start)
mark
printf '[sockets]\ncredts = 3\n' >"$conf"
systemctl restart exsd.service 2>"$LOGS/restart.err" && fail "systemctl restart with a bad file succeeded" ||
	pass "systemctl restart exsd fails: $(head -c 120 "$LOGS/restart.err")"
journal "the bad line, FILE:LINE" 3 "^$conf:2: unknown key \"credts\" in \\[sockets\\]"
journal "why exsd did not start" 3 "^not starting: bad configuration in $conf"
journal "systemd: exit status 78" 5 'status=78/'
# a client now: refused at once, one more failed start, no more
t0=$(date +%s.%N)
X config >"$LOGS/x.out" 2>&1 && fail "exsctl config worked without exsd" ||
	pass "a client meanwhile is refused in $(echo "$(date +%s.%N) $t0" | awk '{printf "%.1f", $1 - $2}') s: $(head -n 1 "$LOGS/x.out")"
sleep 5
n=$(journalctl -u exsd.service --after-cursor="$cursor" -o cat --no-pager | grep -c '^not starting: bad configuration')
if [ "$n" = 2 ] && [ "$(service NRestarts)" = 0 ] && [ "$(service ActiveState)" = failed ] &&
	[ "$(service ExecMainStatus)" = 78 ]; then
	pass "exsd.service failed once per start (2 starts, 0 restarts), exit 78"
else fail "bad file: $n starts logged, NRestarts $(service NRestarts), $(service ActiveState), exit $(service ExecMainStatus)"; fi
[ "$(systemctl show -P ActiveState exsd.socket)" = active ] &&
	pass "exsd.socket still listening ($(systemctl show -P SubState exsd.socket))" ||
	fail "exsd.socket $(systemctl show -P ActiveState exsd.socket)"
# mended: the next client starts exsd again
printf '[sockets]\ncredits = 3\n' >"$conf"
out=$(timeout 30 "$B/tests/exs_conf" defaults 2>&1)
[ "$out" = "credits=3 sp_max=1024" ] && pass "file mended: the next client starts exsd ($out)" ||
	fail "after mending: $out"

echo "---- journalctl -u exsd (last 15 lines)"
journalctl -u exsd.service -n 15 --no-pager -q | sed 's/^/    /'
summary
