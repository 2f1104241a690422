#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# layers.sh SRC: exsd's call graph goes one way, as exsd/exsd.h's top comment
# draws it. Every function a file defines without `static` is found by its
# definition line; a call from another file is a match of "name(". A call
# to a file of the same or a higher level fails the test, unless it is one
# of the edges listed in KNOWN (none now; an edge that must stay for a
# while is listed there, and one that is gone fails until it is dropped).
src=${1:?usage: layers.sh SRC}
cd "$src/exsd" || exit 1
declare -A level=([main.c]=6 [ctl.c]=5 [cm.c]=4 [observe.c]=4 [view.c]=3
	[out.c]=2 [config.c]=2 [limits.c]=2 [negotiate.c]=2 [ports.c]=2 [qpown.c]=2 [proc.c]=1
	[index.c]=1 [base.c]=0)
KNOWN=""
fail=0
for f in *.c; do
	[ -n "${level[$f]}" ] || { echo "FAIL $f has no level in layers.sh (and exsd.h)"; fail=1; }
done
defs() { # FILE: its non-static function names
	grep -E '^[a-z][A-Za-z0-9_ *]*[ *][a-z_][a-z0-9_]*\(' "$1" | grep -v '^static' |
		sed -E 's/^[^(]*[ *]([a-z_][a-z0-9_]*)\(.*/\1/'
}
seen=""
for g in *.c; do
	for fn in $(defs "$g"); do
		for f in *.c; do
			[ "$f" = "$g" ] && continue
			grep -qE "(^|[^a-z0-9_])$fn\(" "$f" || continue
			if [ "${level[$g]}" -lt "${level[$f]}" ]; then continue; fi
			edge="$f->$g"
			if [[ " $KNOWN " == *" $edge "* ]]; then
				[[ " $seen " == *" $edge "* ]] || seen="$seen $edge"
				continue
			fi
			echo "FAIL $f (level ${level[$f]}) calls up: $fn() of $g (level ${level[$g]})"
			fail=1
		done
	done
done
for k in $KNOWN; do
	[[ " $seen " == *" $k "* ]] || { echo "FAIL known edge $k is gone: drop it from KNOWN"; fail=1; }
done
[ $fail = 0 ] && echo "PASS exsd's calls go down only (known edges left: ${KNOWN:-none})"
exit $fail
