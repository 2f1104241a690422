# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# exsctl against what the tests themselves did: sourced by one-host.sh with
# exsd running. Defines exsctl_tests.
X() { timeout 20 "$B/exsctl" "$@"; }

# jcheck NAME JQ-EXPR FILE: the expression must be true for the JSON in FILE
jcheck() {
	if jq -e "$2" "$3" >/dev/null 2>&1; then pass "$1"; else
		fail "$1"; echo "    jq: $2"; jq -c '.[]' "$3" 2>/dev/null | cut -c1-400 | sed 's/^/    | /' | head -n 40
	fi
}

# hold NAME ARGS...: start an exs_hold (under timeout) writing $LOGS/NAME.out
hold() {
	local name=$1
	shift
	timeout 300 "$B/tests/exs_hold" "$@" >"$LOGS/$name.out" 2>&1 &
	HOLDS+=($!)
}

# pid_of NAME: the exs_hold's own pid (not timeout's), once it printed it
pid_of() {
	wait_for "$LOGS/$1.out" "pid " 60 || { echo 0; return; }
	sed -n 's/.*pid \([0-9]*\).*/\1/p' "$LOGS/$1.out" | head -n 1
}

# until_json EXPR ARGS...: poll `exsctl -j ARGS` (5 s at most) until EXPR holds
until_json() {
	local expr=$1
	shift
	for _ in $(seq 50); do
		X -j "$@" >$LOGS/poll.json
		jq -e "$expr" $LOGS/poll.json >/dev/null && return 0
		sleep 0.1
	done
	return 1
}

wait_ready() { wait_for "$LOGS/$1.out" ready 60 || { fail "$1 not ready"; sed 's/^/    /' "$LOGS/$1.out"; }; }

exsctl_tests() {
	local j=$LOGS/j.json
	HOLDS=()
	X -j conns >$j
	jcheck "exsctl: no connections at first" 'length == 0' $j
	X -j devices >$j
	jcheck "exsctl devices: rxe0 is IB/RoCE, siw0 is iWARP, both active" \
		'(map(select(.name=="rxe0" and .transport=="IB/RoCE" and .state=="active")) | length == 1) and
		 (map(select(.name=="siw0" and .transport=="iWARP" and .state=="active")) | length == 1)' $j

	timeout 300 "$B/exsctl" -j monitor >$LOGS/monitor.json 2>$LOGS/monitor.err &
	local mon=$!
	timeout 300 "$B/exsctl" monitor >$LOGS/monitor.txt 2>&1 &
	local montxt=$!
	sleep 0.5

	# pair A: rxe, seqpacket, client offers 8 credits; pair B: siw, stream, 16
	hold sa server "$EXS_VM_RXE_IP" 7481 -n 5 -z 1000
	local sa=$(pid_of sa)
	hold ca client "$EXS_VM_RXE_IP" 7481 -n 5 -z 1000 -c 8
	hold sb server "$EXS_VM_SIW_IP" 7482 -t stream -n 3 -z 5000
	local sb=$(pid_of sb)
	hold cb client "$EXS_VM_SIW_IP" 7482 -t stream -n 3 -z 5000 -c 16
	# pair D: rxe, stream, client offers 4; pair E: siw, seqpacket, server offers 12
	hold sd server "$EXS_VM_RXE_IP" 7484 -t stream -n 2 -z 3000
	local sd=$(pid_of sd)
	hold cd client "$EXS_VM_RXE_IP" 7484 -t stream -n 2 -z 3000 -c 4
	hold se server "$EXS_VM_SIW_IP" 7485 -n 4 -z 2000 -c 12
	local se=$(pid_of se)
	hold ce client "$EXS_VM_SIW_IP" 7485 -n 4 -z 2000
	for n in sa ca sb cb sd cd se ce; do wait_ready $n; done
	local ca=$(pid_of ca) cb=$(pid_of cb) cd=$(pid_of cd) ce=$(pid_of ce)

	X -j conns >$j
	jcheck "exsctl conns: eight established connections, both types on both devices" \
		'length == 8 and all(.state == "established") and
		 ([.[] | .device + "/" + .type] | unique) == ["rxe0/seqpacket", "rxe0/stream", "siw0/seqpacket", "siw0/stream"]' $j
	jcheck "exsctl conns: rxe seqpacket client: credits 8 negotiated, 5000 bytes in 5 sends each way, live" \
		"map(select(.pid == $ca))[0] | .device == \"rxe0\" and .transport == \"IB/RoCE\" and .type == \"seqpacket\"
		 and .credits == 8 and .bytes_sent == 5000 and .sends == 5 and .bytes_received == 5000
		 and .receives == 5 and .peer_port == 7481 and .live and .errors == 0
		 and .send_credits_used == 0 and .sends_queued == 0" $j
	jcheck "exsctl conns: rxe seqpacket server: credits 8, counters mirror the client's" \
		"map(select(.pid == $sa))[0] | .local_port == 7481 and .credits == 8 and .bytes_received == 5000
		 and .bytes_sent == 5000 and .comm == \"exs_hold\"" $j
	jcheck "exsctl conns: siw stream client: credits 16, 15000 bytes each way" \
		"map(select(.pid == $cb))[0] | .device == \"siw0\" and .transport == \"iWARP\" and .type == \"stream\"
		 and .credits == 16 and .bytes_sent == 15000 and .bytes_received == 15000 and .sends == 3" $j
	jcheck "exsctl conns: rxe stream client: credits 4, 6000 bytes each way" \
		"map(select(.pid == $cd))[0] | .device == \"rxe0\" and .type == \"stream\" and .credits == 4
		 and .bytes_sent == 6000 and .bytes_received == 6000 and .sends == 2 and .receives == 2" $j
	jcheck "exsctl conns: siw seqpacket server: the server's 12 credits win, 8000 bytes each way" \
		"map(select(.pid == $se))[0] | .device == \"siw0\" and .type == \"seqpacket\" and .credits == 12
		 and .bytes_received == 8000 and .bytes_sent == 8000 and .local_port == 7485" $j
	X -j conns port 7481 >$j
	jcheck "exsctl conns port 7481: both ends of pair A" "length == 2 and all(.local_port == 7481 or .peer_port == 7481)" $j
	X -j conns pid $cb state established >$j
	jcheck "exsctl conns pid N state established: one" "length == 1 and .[0].pid == $cb" $j
	if [ "$(X conns | wc -l)" = 9 ] && [ "$(X -H conns | wc -l)" = 8 ] && X conns | head -n1 | grep -q '^ID *State'; then
		pass "exsctl conns text: a header and one line per connection; -H drops the header"
	else
		fail "exsctl conns text"; X conns | sed 's/^/    /'
	fi
	if ! X conns bogus 1 2>/dev/null; then pass "exsctl: an unknown filter key is refused"; else fail "unknown filter accepted"; fi
	X -j listeners >$j
	jcheck "exsctl listeners: the four listening ports with their backlog" \
		'(map(.local_port) | sort) == [7481, 7482, 7484, 7485] and all(.backlog == 2)' $j
	jcheck "exsctl listeners: on siw0 iWARP, on rxe0 IB/RoCE" \
		'(map(select(.local_port == 7482 or .local_port == 7485) | .transport) == ["iWARP", "iWARP"]) and
		 (map(select(.local_port == 7481 or .local_port == 7484) | .transport) == ["IB/RoCE", "IB/RoCE"])' $j
	X -j ports >$j
	jcheck "exsctl ports: the four listening ports are in the table" \
		'(map(select(.state == "listening") | .local_port) | sort) == [7481, 7482, 7484, 7485]' $j
	X -j clients >$j
	jcheck "exsctl clients: eight processes, one connection each, plus the observers" \
		"(map(select(.observer == false)) | length == 8) and
		 (map(select(.pid == $ca))[0].connections == 1)" $j
	X -j config >$j
	jcheck "exsctl config: the effective socket path" 'map(select(.key == "daemon.socket"))[0].value == "/run/exs/exsd.sock"' $j
	X -p conns >$LOGS/pretty.json
	jcheck "exsctl -p: pretty JSON parses to the same rows" 'length == 8' $LOGS/pretty.json

	# another uid sees the connections but not their owners or counters
	setpriv --reuid=65534 --regid=65534 --clear-groups "$B/exsctl" -j conns >$j 2>&1
	jcheck "exsctl as nobody: owners and counters of root's connections hidden" \
		'length == 8 and all(.hidden == true and (has("pid") | not) and (has("bytes_sent") | not))' $j
	local cid
	cid=$(X -j conns pid $ca | jq '.[0].id')
	if setpriv --reuid=65534 --regid=65534 --clear-groups "$B/exsctl" disconnect "$cid" 2>$LOGS/perm.err; then
		fail "exsctl disconnect by another uid was allowed"
	elif grep -q "not permitted" $LOGS/perm.err; then
		pass "exsctl disconnect by another uid: refused (Operation not permitted)"
	else
		fail "exsctl disconnect by another uid: wrong error"; cat $LOGS/perm.err
	fi

	# a graceful close removes both ends of pair A
	kill -USR1 $ca
	wait_for $LOGS/ca.out closed 30
	until_json 'length == 6' conns
	X -j conns >$j
	jcheck "exsctl conns after the rxe seqpacket client closed: both ends of pair A are gone, six left" \
		'length == 6 and all(.local_port != 7481 and .peer_port != 7481)' $j

	# kill -9 of a client: exsd drops it and its peer's connection
	kill -9 $cb
	local k
	for k in $(seq 50); do
		X -j conns >$j
		jq -e 'length == 4' $j >/dev/null && break
		sleep 0.1
	done
	jcheck "exsctl conns after kill -9 of the siw stream client: both ends of pair B gone (in $((k / 10)).$((k % 10)) s)" \
		'length == 4 and all(.local_port != 7482 and .peer_port != 7482)' $j

	# root may disconnect a connection
	hold sc server "$EXS_VM_RXE_IP" 7483
	local sc=$(pid_of sc)
	hold cc client "$EXS_VM_RXE_IP" 7483
	wait_ready sc; wait_ready cc
	local cc=$(pid_of cc)
	cid=$(X -j conns pid $cc | jq '.[0].id')
	if X disconnect "$cid"; then
		until_json 'length == 0' conns port 7483
		X -j conns port 7483 >$j
		jcheck "exsctl disconnect by root: pair C is gone" 'length == 0' $j
	else
		fail "exsctl disconnect by root"
	fi

	# ... and the connection ends in the applications too, both ends with
	# ECONNRESET as exsctl(8) says: a stream under way on rxe0, whose QPs
	# are the applications' (before: exsd dropped its CM id, both libexs
	# asked each other with a PING, both answered and the stream went on)
	timeout 120 "$B/tests/exs_xfer" server "$EXS_VM_RXE_IP" 7486 -n 8000 -M 65536 -t stream >$LOGS/xd.server 2>&1 &
	local xs=$! xc crc src ms t0
	wait_for $LOGS/xd.server listening 30
	timeout 120 "$B/tests/exs_xfer" client "$EXS_VM_RXE_IP" 7486 -n 8000 -M 65536 -t stream >$LOGS/xd.client 2>&1 &
	xc=$!
	if wait_for $LOGS/xd.client connected 30 && wait_for $LOGS/xd.server connected 30 &&
		until_json 'length == 2' conns port 7486; then
		cid=$(jq '.[0].id' $LOGS/poll.json)
		t0=$(date +%s%N)
		X disconnect "$cid"
		wait $xc; crc=$?
		wait $xs; src=$?
		ms=$((($(date +%s%N) - t0) / 1000000))
		if [ $crc != 0 ] && [ $src != 0 ] && grep -q "Connection reset by peer" $LOGS/xd.client &&
			grep -q "Connection reset by peer" $LOGS/xd.server && [ $ms -le 5000 ]; then
			pass "exsctl disconnect of a stream under way on rxe0: both ends failed with ECONNRESET within $ms ms"
		else
			fail "exsctl disconnect of a stream under way: client exit $crc, server exit $src after $ms ms"
			sed 's/^/    /' $LOGS/xd.client $LOGS/xd.server | tail -n 8
		fi
	else
		fail "exsctl disconnect: the stream did not start"
		kill $xc $xs 2>/dev/null
		wait $xc $xs
	fi

	# an id that names nothing: said so, not as a file error
	if X disconnect 999999 >$LOGS/nope.out 2>&1; then fail "exsctl disconnect 999999 succeeded"
	elif grep -qx "exsctl: no connection 999999 (see exsctl conns)" $LOGS/nope.out; then
		pass "exsctl disconnect of an unknown id: 'no connection 999999', exit 1"
	else fail "exsctl disconnect of an unknown id: wrong message"; sed 's/^/    /' $LOGS/nope.out; fi

	kill -INT $mon $montxt
	wait $mon $montxt
	# text and JSON are the same events: the listener of pair A in both
	local aid
	aid=$(jq -s -r 'map(select(.event == "listen" and .sock.local_port == 7481))[0].sock.id' $LOGS/monitor.json)
	if grep -Eq "^[0-9:.]+ listen +id $aid seqpacket [0-9.]+:7481 -> - rxe0 IB/RoCE pid $sa exs_hold\$" $LOGS/monitor.txt; then
		pass "exsctl monitor text: the listen of pair A shows its id $aid and its owner's pid $sa"
	else
		fail "exsctl monitor text: the listen of pair A (id $aid, pid $sa)"; grep ':7481 ' $LOGS/monitor.txt | sed 's/^/    /'
	fi
	local m=$LOGS/monitor.json
	jq -s '.' $m >$LOGS/monitor.all.json 2>/dev/null
	jcheck "exsctl monitor: pair A in order: listen, connect and accept, close, disconnect" \
		'[.[] | select(.sock.local_port == 7481 or .sock.peer_port == 7481) | .event] as $e |
		 ($e | index("listen")) < ($e | index("connect")) and
		 ($e | index("listen")) < ($e | index("accept")) and
		 ($e | index("connect")) < ($e | index("close")) and
		 ($e | index("accept")) < ($e | index("disconnect"))' $LOGS/monitor.all.json
	jcheck "exsctl monitor: listens on siw0 are iWARP, on rxe0 IB/RoCE" \
		'map(select(.event == "listen")) | (map(select(.sock.device == "siw0") | .sock.transport) | length > 0 and all(. == "iWARP"))
		 and (map(select(.sock.device == "rxe0") | .sock.transport) | length > 0 and all(. == "IB/RoCE"))' $LOGS/monitor.all.json
	jcheck "exsctl monitor: the killed client's connection ends as a close with its reason" \
		"map(select(.sock.pid == $cb)) | last | .event == \"close\" and .error == \"No such process\"" $LOGS/monitor.all.json
	echo "    monitor saw $(jq length $LOGS/monitor.all.json) events"
	kill -TERM $sa $ca $sb $sc $cc $sd $cd $se $ce 2>/dev/null
	wait "${HOLDS[@]}" 2>/dev/null
}
