# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# One exsd per control socket, sourced by daemon.sh with exsd ($EXSD_PID)
# serving the default socket. Defines lock_tests: a second exsd refuses to
# start and leaves the first one serving; a socket that systemd holds is
# neither taken by a hand-started exsd nor unlinked by the exsd it starts.
lock_tests() {
	local sock=/run/exs/exsd.sock act=/run/exs/act.sock rc ino apid
	timeout 10 "$B/exsd" >"$LOGS/second.out" 2>&1
	rc=$?
	if [ $rc = 1 ] && grep -q "another exsd (pid $EXSD_PID) serves $sock" "$LOGS/second.out"; then
		pass "a second exsd on the same socket: refused, naming the first (pid $EXSD_PID)"
	else fail "a second exsd on the same socket (exit $rc)"; sed 's/^/    /' "$LOGS/second.out"; fi
	if timeout 20 "$B/exsctl" clients >/dev/null && grep -q "serving on $sock" "$LOGS"/exsd-*.log; then
		pass "... and the first one still serves"
	else fail "the first exsd no longer serves"; fi

	# as systemd's exsd.socket: the socket is live before any exsd runs
	systemd-socket-activate --seqpacket -l "$act" "$B/exsd" -s "$act" >"$LOGS/exsd-act.log" 2>&1 &
	apid=$! # it execs exsd in this process
	wait_for "$LOGS/exsd-act.log" "Listening on" 20 || fail "systemd-socket-activate did not listen"
	ino=$(stat -c %i "$act")
	timeout 10 "$B/exsd" -s "$act" >"$LOGS/hand.out" 2>&1
	rc=$?
	if [ $rc = 1 ] && grep -q "$act is in use by another process" "$LOGS/hand.out"; then
		pass "exsd by hand on a socket systemd listens on: refused"
	else fail "exsd by hand on systemd's socket (exit $rc)"; sed 's/^/    /' "$LOGS/hand.out"; fi
	# its probe was a connection: systemd-socket-activate started exsd
	wait_for "$LOGS/exsd-act.log" "serving on $act" 20 || fail "socket activation did not start exsd"
	timeout 10 "$B/exsd" -s "$act" >"$LOGS/hand.out" 2>&1
	rc=$?
	if [ $rc = 1 ] && grep -q "another exsd (pid $apid) serves $act" "$LOGS/hand.out"; then
		pass "exsd by hand beside the socket-activated one: refused, naming it"
	else fail "exsd by hand beside the activated one (exit $rc)"; sed 's/^/    /' "$LOGS/hand.out"; fi
	if timeout 20 "$B/exsctl" -s "$act" clients >/dev/null && [ "$(stat -c %i "$act")" = "$ino" ]; then
		pass "the socket-activated exsd serves systemd's socket"
	else fail "systemd's socket was replaced or does not answer"; fi
	kill -TERM $apid
	wait $apid
	rc=$?
	if [ $rc = 0 ] && [ -S "$act" ] && [ "$(stat -c %i "$act")" = "$ino" ]; then
		pass "exsd stopped (exit 0) and left systemd's socket in place"
	else fail "after exsd stopped (exit $rc): systemd's socket is gone or replaced"; ls -li "$act" 2>&1 | sed 's/^/    /'; fi
	tail -n 5 "$LOGS/exsd-act.log" | sed 's/^/    /'
	rm -f "$act"
}
