#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The device's own limits (issue 12): exs_devhog fills a device's table of
# QPs (or CQs, or MRs) from one process; EXS processes then meet it. A
# connect fails at once with ENOBUFS (not EINVAL, not the driver's ENOMEM,
# not a hang), exs_mregister fails with ENOBUFS at the MR limit, a
# connection request the listener cannot build is refused (ECONNREFUSED at
# the peer) while its accept keeps waiting, exsd keeps answering and is
# left with no connection of theirs; once the hog exits, connects work
# again. Which tables fit the guest: docs/man/exs.7.md, LIMITS. Run by
# `ctest -R vm_devlimits` through tests/vm/exs-vm.
set -u
. "$(dirname "$0")/lib.sh"
T=$B/tests
X() { timeout 20 "$B/exsctl" "$@"; }

# the hog pins a page per MR (siw counts it even for root) and maps each
# QP's and CQ's queues into itself (65,530 mappings by default)
ulimit -l unlimited
sysctl -qw vm.max_map_count=1000000
t_start=$(date +%s)
start_exsd_conf devlimits </dev/null

# hog DEV KIND: exs_devhog fills the table; HOG its pid (HOG_PID its
# timeout's), HOG_N (objects it made), HOG_ERR (the errno it met); the
# script ends if it met none
hog() {
	: >"$LOGS/hog-$1-$2.out"
	timeout -k 10 600 "$T/exs_devhog" "$1" "$2" >"$LOGS/hog-$1-$2.out" 2>"$LOGS/hog-$1-$2.err" &
	HOG_PID=$!
	wait_for "$LOGS/hog-$1-$2.out" ready 300
	HOG=$(child "$HOG_PID") # exs_devhog itself: timeout passes on no SIGUSR1
	sed -n 's/^reached/    hog: reached/p' "$LOGS/hog-$1-$2.out"
	HOG_N=$(sed -n 's/^reached \([0-9]*\) .*/\1/p' "$LOGS/hog-$1-$2.out")
	HOG_ERR=$(sed -n 's/^reached [0-9]* [a-z]* errno [0-9]* (\([A-Z]*\):.*/\1/p' "$LOGS/hog-$1-$2.out")
	if [ -z "$HOG_N" ] || [ -z "$HOG_ERR" ] || [ "$HOG_ERR" = none ]; then
		fail "$1 $2: exs_devhog reached no limit: $(cat "$LOGS/hog-$1-$2.out" "$LOGS/hog-$1-$2.err")"
		kill "$HOG"
		summary
		exit 1
	fi
}
unhog() {
	kill -TERM "$HOG"
	wait "$HOG_PID"
	echo "    hog: $(tail -n 1 "$LOGS/hog-$1-$2.out")"
}

# res_count DEV KIND: the kernel's count of the device's objects
res_count() { rdma resource show "$1" | grep -o " $2 [0-9]*" | awk '{ print $2 }'; }
dev_max() { ibv_devinfo -v -d "$1" | awk -v k="max_$2:" '$1 == k { print $2 }'; }

# start_devfull KIND PORT: exs_devfull over that device, its input on
# descriptor 7 (no spare connections: each connect builds its own)
start_devfull() {
	rm -f "$LOGS/devfull.in"
	mkfifo "$LOGS/devfull.in"
	EXS_SPARE_QPS=0 timeout -k 10 1200 "$T/exs_devfull" "$(dev_ip $1)" "$2" \
		<"$LOGS/devfull.in" >"$LOGS/devfull-$1.out" 2>&1 &
	DEVFULL_PID=$!
	DEVFULL_OUT=$LOGS/devfull-$1.out
	exec 7>"$LOGS/devfull.in"
	wait_for "$DEVFULL_OUT" ready 60 || fail "exs_devfull on $1: $(cat "$DEVFULL_OUT")"
}
stop_devfull() {
	exec 7>&-
	wait "$DEVFULL_PID"
}

# devfull_check NAME: one line to exs_devfull, its answers in $LOGS/NAME
devfull_check() {
	local before
	before=$(grep -c '^checked' "$DEVFULL_OUT")
	echo go >&7
	local end=$(($(date +%s) + 60))
	until [ "$(grep -c '^checked' "$DEVFULL_OUT")" -gt "$before" ]; do
		[ "$(date +%s)" -ge $end ] && break
		sleep 0.2
	done
	awk -v n="$before" '/^checked/ { c++; next } c == n' "$DEVFULL_OUT" >"$LOGS/$1"
	sed 's/^/    devfull: /' "$LOGS/$1"
}
has() { grep -q "^$2" "$LOGS/$1"; }

# fresh_connect TAG IP PORT: exs_xfer's connect from a new process; its
# output in $LOGS/TAG.out, FC_MS how long it took
fresh_connect() {
	local t0
	t0=$(date +%s%N)
	EXS_DEBUG=1 timeout 60 "$T/exs_xfer" client "$2" "$3" -n 2 >"$LOGS/$1.out" 2>&1
	FC_RC=$?
	FC_MS=$((($(date +%s%N) - t0) / 1000000))
	echo "    $1: rc $FC_RC in $FC_MS ms: $(grep -v '^libexs\[' "$LOGS/$1.out" | head -n 1)"
	grep -m 1 "table of" "$LOGS/$1.out" | sed 's/^/    /'
	return 0
}

# fill DEV KIND SEC: hog the table; pass if the kernel counts it full
# (rxe keeps its last MR: one short counts)
fill() {
	local max n
	max=$(dev_max "$1" "$2")
	hog "$1" "$2"
	n=$(res_count "$1" "$2")
	if [ -n "$n" ] && [ "$n" -ge $((max - 1)) ]; then
		pass "$3: $1: exs_devhog filled the $2 table ($HOG_N; $n of max_$2 $max; the driver said $HOG_ERR)"
	else
		fail "$3: $1: the $2 table holds $n of $max"
	fi
}

# refused_new SEC KIND IP PORT: a new process's connect fails at once
# with ENOBUFS
refused_new() {
	fresh_connect "full-$2-${1%%:*}" "$3" "$4"
	if [ $FC_RC != 0 ] && grep -q "No buffer space available" "$LOGS/full-$2-${1%%:*}.out" && [ $FC_MS -lt 20000 ]; then
		pass "$1: a new process's connect fails with ENOBUFS in $FC_MS ms"
	else
		fail "$1: a new process's connect at the $2 limit: $(cat "$LOGS/full-$2-${1%%:*}.out")"
	fi
}

# served_again SEC KIND IP PORT WHAT: after the hog, a new process's
# connect to the listener that bg started (exs_xfer server) works
served_again() {
	local rc
	fresh_connect "after-$2" "$3" "$4"
	wait "$BG_PID"
	rc=$?
	BGS=()
	[ $FC_RC = 0 ] && [ $rc = 0 ] && pass "$1: after the hog, $5" ||
		fail "$1: after the hog: client rc $FC_RC, listener rc $rc: $(cat "$LOGS/accept-$2.out")"
}

# ---- a. siw's table of QPs
ip=$(dev_ip siw) dev=$(dev_name siw)
start_devfull siw 7900
bg accept-qp "$T/exs_xfer" server "$ip" 7910 -n 2
wait_for "$LOGS/accept-qp.out" listening 30
fill "$dev" qp a
refused_new "a: $dev" qp "$ip" 7900
devfull_check qp-full
has qp-full "connect ENOBUFS" && has qp-full "mregister ok" &&
	pass "a: $dev: a process using the device: connect ENOBUFS, exs_mregister works" ||
	fail "a: $dev: a process using the device at the QP limit (above)"
X clients >/dev/null && pass "a: exsd answers with the QP table full" || fail "a: exsd did not answer"
# the listener's side: one QP free, taken by the connecting process
kill -USR1 "$HOG"
wait_for "$LOGS/hog-$dev-qp.out" "freed one" 10
fresh_connect refused-qp "$ip" 7910
if [ $FC_RC != 0 ] && grep -q "Connection refused" "$LOGS/refused-qp.out" && [ $FC_MS -lt 20000 ] &&
	kill -0 "$BG_PID" 2>/dev/null; then
	pass "a: $dev: a request the listener cannot build is refused (ECONNREFUSED in $FC_MS ms), its accept waits on"
else
	fail "a: $dev: a request the listener cannot build: $(cat "$LOGS/refused-qp.out"), listener: $(cat "$LOGS/accept-qp.out")"
fi
unhog "$dev" qp
served_again "a: $dev" qp "$ip" 7910 "the same listener accepts a connect"
devfull_check qp-after
has qp-after "connect ok" && pass "a: $dev: the process using the device connects again" ||
	fail "a: $dev: the process using the device, after the hog (above)"

# ---- b. siw's table of CQs: a new process makes its first ones; one that
# has a shared CQ with room makes none
fill "$dev" cq b
bg accept-cq "$T/exs_xfer" server "$ip" 7911 -n 2
wait_for "$LOGS/accept-cq.out" listening 30
refused_new "b: $dev" cq "$ip" 7911
devfull_check cq-full
has cq-full "connect ok" && pass "b: $dev: a process with a shared CQ connects (no new CQ needed)" ||
	fail "b: $dev: a process with a shared CQ at the CQ limit (above)"
unhog "$dev" cq
served_again "b: $dev" cq "$ip" 7911 "a new process connects"

stop_devfull

# mr_table KIND PORT TAG: the device's table of MRs, from a process using
# the device (exs_devfull) and from a new one
mr_table() {
	local ip dev
	ip=$(dev_ip $1) dev=$(dev_name $1)
	start_devfull $1 $2
	fill "$dev" mr $3
	refused_new "$3: $dev" mr "$ip" $2
	devfull_check mr-full-$1
	has mr-full-$1 "connect ENOBUFS" && has mr-full-$1 "mregister ENOBUFS" && has mr-full-$1 "recv ENOBUFS" &&
		pass "$3: $dev: a process using the device: connect, exs_mregister, exs_recv (implicit) fail with ENOBUFS" ||
		fail "$3: $dev: a process using the device at the MR limit (above)"
	X clients >/dev/null && pass "$3: exsd answers with the MR table full" || fail "$3: exsd did not answer"
	unhog "$dev" mr
	devfull_check mr-after-$1
	has mr-after-$1 "connect ok" && has mr-after-$1 "mregister ok" && has mr-after-$1 "recv ok" &&
		has mr-after-$1 "moved ok ok" &&
		pass "$3: $dev: after the hog, connect, exs_mregister and the transfer work" ||
		fail "$3: $dev: the process using the device, after the hog (above)"
	stop_devfull
}

# ---- c. the tables of MRs; rxe's QPs and CQs take more memory than the
# guest has before their tables fill (exs(7), LIMITS)
mr_table siw 7920 c
mr_table rxe 7930 d

sleep 1
left=$(X -H conns | wc -l)
[ "$left" = 0 ] && pass "exsd lists no connection left over" || { fail "exsd lists $left connections"; X conns; }
stop_exsd devlimits
echo "    took $(($(date +%s) - t_start)) s"
summary
