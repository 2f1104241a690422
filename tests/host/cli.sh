#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# cli.sh BUILD VERSION: the command lines of exsd, exsctl and exs-perf, on
# the host (none of this reaches a device or exsd): --version prints the
# project's version, --help the usage on stdout, and a usage error one line
# naming the program (not its path) plus a hint to --help, exit 2.
set -uo pipefail
build=$(cd "${1:?BUILD}" && pwd) || exit 1
version=${2:?VERSION}
tmp=$(mktemp -d /tmp/exs-cli.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT
unset EXS_SOCKET
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1"; sed 's/^/    /' "$tmp/out" "$tmp/err"; }

for prog in exsd exsctl exs-perf; do
	p=$build/$prog
	"$p" --version >"$tmp/out" 2>"$tmp/err"
	if [ $? = 0 ] && [ "$(cat "$tmp/out")" = "$prog (EXS) $version" ] && [ ! -s "$tmp/err" ]; then
		ok "$prog --version: '$prog (EXS) $version'"
	else ko "$prog --version"; fi
	"$p" --help >"$tmp/out" 2>"$tmp/err"
	if [ $? = 0 ] && head -n 1 "$tmp/out" | grep -q "^usage: $prog " && [ ! -s "$tmp/err" ]; then
		ok "$prog --help: the usage on stdout, exit 0"
	else ko "$prog --help"; fi
	# an unknown option, a missing option argument, a stray word
	for args in "-x" "--bogus" "-s" "stray words here"; do
		# shellcheck disable=SC2086
		"$p" $args >"$tmp/out" 2>"$tmp/err"
		rc=$?
		if [ $rc = 2 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l <"$tmp/err")" = 2 ] &&
			head -n 1 "$tmp/err" | grep -q "^$prog: " &&
			[ "$(tail -n 1 "$tmp/err")" = "Try '$prog --help'." ] && ! grep -q "$build" "$tmp/err"; then
			ok "$prog $args: one line naming $prog, then Try '$prog --help'., exit 2"
		else echo "    exit $rc"; ko "$prog $args"; fi
	done
done

# exsctl's own argument checks, before it looks for exsd
for args in "disconnect" "disconnect abc" "disconnect -1" "disconnect 99999999999" "conns pid"; do
	# shellcheck disable=SC2086
	"$build/exsctl" -s "$tmp/none.sock" $args >"$tmp/out" 2>"$tmp/err"
	rc=$?
	if [ $rc = 2 ] && [ "$(wc -l <"$tmp/err")" = 2 ] && [ "$(tail -n 1 "$tmp/err")" = "Try 'exsctl --help'." ]; then
		ok "exsctl $args: $(head -n 1 "$tmp/err"), exit 2"
	else echo "    exit $rc"; ko "exsctl $args"; fi
done

# libexs with no exsd: ENETDOWN at once, and under EXS_DEBUG one line on
# stderr that says which path it tried and why (never without EXS_DEBUG)
if [ -x "$build/tests/exs_errors" ]; then
	EXS_SOCKET=$tmp/none.sock EXS_DEBUG=1 timeout 20 "$build/tests/exs_errors" noexsd 127.0.0.1 7471 \
		>"$tmp/out" 2>"$tmp/err"
	rc=$?
	n=$(grep -c "cannot reach exsd at $tmp/none.sock: No such file or directory" "$tmp/err")
	if [ $rc = 0 ] && [ "$n" = 1 ]; then
		ok "no exsd, EXS_DEBUG: ENETDOWN and one hint naming the path"
	else echo "    exit $rc, $n hints"; ko "no exsd, EXS_DEBUG: the hint"; fi
	EXS_SOCKET=$tmp/none.sock timeout 20 "$build/tests/exs_errors" noexsd 127.0.0.1 7471 \
		>"$tmp/out" 2>"$tmp/err"
	if [ $? = 0 ] && [ ! -s "$tmp/err" ]; then
		ok "no exsd, no EXS_DEBUG: ENETDOWN and nothing on stderr"
	else ko "no exsd, no EXS_DEBUG: silent"; fi
fi

echo "$pass passed, $fail failed"
[ $fail = 0 ] && [ $pass -gt 0 ]
