# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# Helpers for the integration tests, sourced inside an exs-vm guest.
# Every program runs under its own timeout; results are counted and the
# script ends with "N passed, N failed".
B=${EXS_BUILD:?EXS_BUILD must name the build directory}
PASS=0
FAIL=0
LOGS=/tmp/exs-it
mkdir -p $LOGS

pass() { PASS=$((PASS + 1)); echo "PASS $*"; }
fail() { FAIL=$((FAIL + 1)); echo "FAIL $*"; }

# start_exsd NAME: exsd on the default socket, logging to $LOGS/exsd-NAME.log
start_exsd() {
	"$B/exsd" -d >"$LOGS/exsd-$1.log" 2>&1 &
	EXSD_PID=$!
	# its log line, not the socket file: a killed exsd leaves that behind
	for _ in $(seq 100); do
		grep -q "serving on" "$LOGS/exsd-$1.log" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "exsd did not start:"; cat "$LOGS/exsd-$1.log"
	return 1
}

# start_exsd_conf NAME < CONFIG: exsd with that exs.conf ($LOGS/NAME.conf),
# without -d (its debug log would slow every connect), logging to
# $LOGS/exsd-NAME.log; the script fails and ends if it does not start
start_exsd_conf() {
	cat >"$LOGS/$1.conf"
	"$B/exsd" -c "$LOGS/$1.conf" >"$LOGS/exsd-$1.log" 2>&1 &
	EXSD_PID=$!
	wait_for "$LOGS/exsd-$1.log" "serving on" 10 && return 0
	fail "exsd start"
	cat "$LOGS/exsd-$1.log"
	summary
	exit 1
}

# warm_up: a connection on each device first (port 7599): exsd opens a
# device's context on first use; its descriptor count after that is the
# baseline of a test that wants none left behind
warm_up() {
	local t sp
	for t in rxe siw; do
		timeout 60 "$B/tests/exs_xfer" server "$(dev_ip $t)" 7599 -n 10 >"$LOGS/warm-$t.server" 2>&1 &
		sp=$!
		timeout 60 "$B/tests/exs_xfer" client "$(dev_ip $t)" 7599 -n 10 -r 30 >"$LOGS/warm-$t.client" 2>&1 ||
			fail "warm-up exs_xfer on $t: $(cat "$LOGS/warm-$t.client")"
		wait $sp || fail "warm-up exs_xfer on $t: $(cat "$LOGS/warm-$t.server")"
	done
	sleep 2
}

# stop_exsd NAME: SIGTERM; exsd must exit 0 (under ASan: with no leak)
stop_exsd() {
	kill "$EXSD_PID" 2>/dev/null
	wait "$EXSD_PID"
	local rc=$?
	if [ $rc = 0 ]; then
		pass "exsd ($1) stopped cleanly on SIGTERM"
	else
		fail "exsd ($1) exited with $rc"
		tail -n 30 "$LOGS/exsd-$1.log" | sed 's/^/    /'
	fi
}

# bg NAME CMD...: CMD in the background writing $LOGS/NAME.out, killed after
# $BG_TIMEOUT s (300); BG_PID is timeout's
bg() {
	local name=$1
	shift
	timeout -k 10 "${BG_TIMEOUT:-300}" "$@" >"$LOGS/$name.out" 2>&1 &
	BG_PID=$!
	BGS+=($BG_PID)
}
BGS=()
# stop_bgs: end what bg started
stop_bgs() {
	local p
	for p in "${BGS[@]}"; do kill "$p" 2>/dev/null; done
	for p in "${BGS[@]}"; do wait "$p" 2>/dev/null; done
	BGS=()
}

# a process's VmRSS (kB) and open descriptors; the program under bg's timeout
rss() { sed -n 's/^VmRSS:[[:space:]]*\([0-9]*\) kB/\1/p' "/proc/$1/status" 2>/dev/null; }
nfds() { ls "/proc/$1/fd" 2>/dev/null | wc -l; }
child() { pgrep -P "$1" | head -n 1; }
# a device kind's (rxe, siw) address and device name in the guest
dev_ip() { if [ "$1" = rxe ]; then echo "$EXS_VM_RXE_IP"; else echo "$EXS_VM_SIW_IP"; fi; }
dev_name() { if [ "$1" = rxe ]; then echo "$EXS_VM_RXE_DEV"; else echo "$EXS_VM_SIW_DEV"; fi; }

# wait_for FILE PATTERN SECS
wait_for() {
	local end=$(($(date +%s) + $3))
	until grep -q "$2" "$1" 2>/dev/null; do
		[ "$(date +%s)" -ge $end ] && return 1
		sleep 0.1
	done
}

# transport_of DEVICE: what exsd logged for the connections it set up there
transport_of() {
	grep -o "established on $1 ([^)]*)" "$LOGS"/exsd-*.log | head -n 1 | sed 's/.*(\(.*\))/\1/'
}

summary() {
	echo "$PASS passed, $FAIL failed"
	[ $FAIL = 0 ] && [ $PASS -gt 0 ]
}
