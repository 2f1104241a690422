#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# exsd-cli.sh BUILD: exsd's command line and configuration file, on the
# host: nothing here needs an RDMA device, as exsd reads and checks its
# configuration before it opens rdmacm.
set -uo pipefail
build=$(cd "${1:?BUILD}" && pwd) || exit 1
exsd=$build/exsd
tmp=$(mktemp -d /tmp/exs-cli.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
unset EXS_SOCKET JOURNAL_STREAM
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1"; [ -z "${2:-}" ] || sed 's/^/    /' "$2"; }
# expect NAME STATUS PATTERN CMD...: CMD exits STATUS and its output has PATTERN
expect() {
	local name=$1 want=$2 pat=$3 rc
	shift 3
	"$@" >"$tmp/out" 2>&1
	rc=$?
	if [ $rc = "$want" ] && grep -q -e "$pat" "$tmp/out"; then ok "$name"; else
		echo "    exit $rc, wanted $want and /$pat/"; ko "$name" "$tmp/out"; fi
}

expect "exsd -h: usage on stdout, exit 0" 0 '^usage: exsd \[-c FILE\]' "$exsd" -h
expect "exsd --help names the default file" 0 'default /.*/exs.conf' "$exsd" --help
expect "exsd with a stray argument: exit 2, a hint to --help" 2 "^Try 'exsd --help'" "$exsd" stray
expect "exsd -x: exit 2, a hint to --help" 2 "^Try 'exsd --help'" "$exsd" -x
expect "exsd -p: the defaults in exs.conf syntax" 0 '^ephemeral = 49152-65535$' \
	"$exsd" -c /dev/null -p
expect "exsd -c missing: exit 78 (EX_CONFIG), the file named" 78 "$tmp/none.conf: No such file" \
	"$exsd" -c "$tmp/none.conf" -p

cat >"$tmp/good.conf" <<'CONF'
# comment
[daemon]
socket = /run/exs-test/x.sock
log_level = notice
[ports]
ephemeral = 40000-40099
[sockets]
credits = 16 ; inline comment
[limits]
max_clients = 8
CONF
"$exsd" -c "$tmp/good.conf" -p >"$tmp/p1" 2>&1
if grep -qx 'credits = 16' "$tmp/p1" && grep -qx 'max_clients = 8' "$tmp/p1" &&
	grep -qx 'ephemeral = 40000-40099' "$tmp/p1" && grep -qx '\[limits\]' "$tmp/p1"; then
	ok "exsd -c FILE -p: the file's values"
else ko "exsd -c FILE -p" "$tmp/p1"; fi
"$exsd" -c "$tmp/p1" -p >"$tmp/p2" 2>&1
if cmp -s "$tmp/p1" "$tmp/p2"; then ok "exsd -p output reads back to the same configuration"
else ko "exsd -p read back" "$tmp/p2"; fi

expect "EXS_SOCKET overrides the file" 0 '^socket = /run/env.sock$' \
	env EXS_SOCKET=/run/env.sock "$exsd" -c "$tmp/good.conf" -p
expect "-s overrides the file and EXS_SOCKET" 0 '^socket = /run/opt.sock$' \
	env EXS_SOCKET=/run/env.sock "$exsd" -c "$tmp/good.conf" -s /run/opt.sock -p
expect "-d overrides log_level" 0 '^log_level = debug$' "$exsd" -c "$tmp/good.conf" -d -p
expect "-s with a relative path: refused, exit 78" 78 'not an absolute path' "$exsd" -c /dev/null -s rel.sock -p

printf '[sockets]\ncredits = 2000\n[limits]\nmax_clients = many\n[nope]\nx = 1\n' >"$tmp/bad.conf"
expect "a bad file: exit 78 (EX_CONFIG)" 78 'not starting: bad configuration' "$exsd" -c "$tmp/bad.conf"
for want in "bad.conf:2: credits: 2000 out of range" "bad.conf:4: max_clients: \"many\" is not a number" \
	"bad.conf:5: unknown section \[nope\]"; do
	expect "reported: $want" 78 "$want" "$exsd" -c "$tmp/bad.conf" -p
done
if ! grep -q "bad.conf:6" "$tmp/out"; then ok "the keys of an unknown section: no error of their own"
else ko "keys of an unknown section reported again" "$tmp/out"; fi
# an empty unknown section is as wrong as one with keys
printf '[sockets]\ncredits = 8\n[socket]\n\n' >"$tmp/empty.conf"
expect "an empty unknown [section]: refused with FILE:LINE" 78 "empty.conf:3: unknown section \[socket\]" \
	"$exsd" -c "$tmp/empty.conf" -p
expect "under journald: errors at priority 3" 78 '^<3>.*bad.conf:2:' \
	env JOURNAL_STREAM=8:1 "$exsd" -c "$tmp/bad.conf"

# One exsd per control socket. On this host exsd stops at rdmacm, after it
# claimed its socket: "cannot open rdmacm" means it would have served.
sock=$tmp/run/exsd.sock
expect "a free socket path: exsd takes it (and stops later, at rdmacm)" 1 'cannot open rdmacm' \
	"$exsd" -c /dev/null -s "$sock"
[ -f "$sock.lock" ] && ok "the lock file beside the socket: $sock.lock" || ko "no $sock.lock" /dev/null
# an exsd that holds the lock (here: this shell, pid 4242 in the file)
echo 4242 >"$sock.lock"
exec 9<"$sock.lock"
flock -x 9
expect "a second exsd on a locked socket: refused, naming the first" 1 \
	"another exsd (pid 4242) serves $sock (it holds $sock.lock); not starting" "$exsd" -c /dev/null -s "$sock"
# shellcheck disable=SC2016
expect "under socket activation too" 1 "another exsd (pid 4242) serves" \
	sh -c 'LISTEN_PID=$$ LISTEN_FDS=1 exec "$0" -c /dev/null -s "$1" 3</dev/null' "$exsd" "$sock"
exec 9<&-
# a live socket nobody locked (systemd's exsd.socket before it starts exsd)
systemd-socket-activate --seqpacket -l "$sock" sleep 30 >"$tmp/act.log" 2>&1 &
act=$!
for _ in $(seq 50); do [ -S "$sock" ] && break; sleep 0.1; done
ino=$(stat -c %i "$sock")
expect "a socket another process listens on: refused" 1 "$sock is in use by another process" \
	"$exsd" -c /dev/null -s "$sock"
[ "$(stat -c %i "$sock" 2>/dev/null)" = "$ino" ] && ok "... and that socket left in place" ||
	ko "the live socket was replaced or removed" /dev/null
kill -9 $act; wait $act 2>/dev/null
# a dead socket left behind (as by a killed exsd) is taken over
[ -S "$sock" ] && ok "a stale socket file is left behind by kill -9" || ko "no stale socket" /dev/null
expect "a stale socket file: exsd goes on (to rdmacm)" 1 'cannot open rdmacm' "$exsd" -c /dev/null -s "$sock"

echo "$pass passed, $fail failed"
[ $fail = 0 ] && [ $pass -gt 0 ]
