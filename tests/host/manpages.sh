#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# manpages.sh SOURCE BUILD: the API manual is complete and renders clean.
# Every function that include/exs.h declares (and libexs.map exports) is
# named in the NAME section of a page in docs/man, every name there is a
# real function, every page renders through groff and man(1) without a
# single warning, the committed roff matches its markdown (when pandoc is
# here to tell), and the build tree holds the .so page that `man NAME`
# needs for each name that has no page of its own.
set -uo pipefail
src=$(cd "${1:?SOURCE}" && pwd) || exit 1
build=$(cd "${2:?BUILD}" && pwd) || exit 1
man=$src/docs/man
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1"; [ -z "${2:-}" ] || printf '%s\n' "$2" | sed 's/^/    /'; }

# the checks need groff and man-db (tools/install-deps); without them the
# test cannot judge anything, and says so by failing
for t in groff man; do
	command -v $t >/dev/null || ko "$t is installed (tools/install-deps: groff-base, man-db)"
done
[ $fail = 0 ] || { echo "$pass passed, $fail failed"; exit 1; }

# functions: prototypes in the header, and the exported symbols
header_fns=$(grep -oE '^[a-z_]+[ *]+exs_[a-z_]+\(' "$src/include/exs.h" | grep -oE 'exs_[a-z_]+\(' | tr -d '(' | sort -u)
map_fns=$(sed -n '/global:/,/local:/p' "$src/libexs/libexs.map" | grep -oE 'exs_[a-z_]+' | sort -u)
[ -n "$header_fns" ] && ok "include/exs.h declares $(wc -w <<<"$header_fns") functions" ||
	ko "no function found in include/exs.h"
if [ "$header_fns" = "$map_fns" ]; then ok "libexs.map exports exactly the functions exs.h declares"; else
	ko "exs.h and libexs.map differ" "$(diff <(echo "$header_fns") <(echo "$map_fns"))"; fi

# names: the NAME section of each roff page ("a, b, c \- summary")
names_of() {
	sed -n '/^\.SH NAME/,/^\.SH /{/^\.SH/d;/^\.PP/d;p}' "$1" | tr '\n' ' ' |
		sed 's/ \(\\\)\{0,1\}- .*//' | tr ',' '\n' | tr -d ' '
}
declare -A page_of
shopt -s nullglob
for p in "$man"/*.3; do
	n=$(names_of "$p")
	[ -n "$n" ] || { ko "$(basename "$p"): no NAME section"; continue; }
	for f in $n; do
		page_of[$f]=$(basename "$p")
		grep -qx "$f" <<<"$header_fns" || ko "$(basename "$p") names $f, which exs.h does not declare"
	done
	own=$(basename "$p" .3)
	grep -qx "$own" <<<"$n" || ko "$(basename "$p") does not name $own in its NAME section"
done
missing=
for f in $header_fns; do [ -n "${page_of[$f]:-}" ] || missing="$missing $f"; done
[ -z "$missing" ] && ok "every function of exs.h has a page naming it (${#page_of[@]} names)" ||
	ko "functions without a page:$missing"
[ -f "$man/exs.7" ] && ok "exs(7) is there" || ko "docs/man/exs.7 is missing"
grep -q 'exs(7)' "$src/include/exs.h" && ! grep -q 'exs(3)' "$src/include/exs.h" &&
	ok "include/exs.h cites exs(7)" || ko "include/exs.h does not cite exs(7) (or still cites exs(3))"

# aliases: `man exs_recv` needs man3/exs_recv.3 (.so to the family page);
# CMake writes them at configure time into BUILD/man/man3 for install
bad=
for f in "${!page_of[@]}"; do
	[ "${page_of[$f]}" = "$f.3" ] && continue
	grep -qx "\.so man3/${page_of[$f]}" "$build/man/man3/$f.3" 2>/dev/null || bad="$bad $f"
done
[ -z "$bad" ] && ok "the build tree has a .so page for every name without its own page" ||
	ko "missing or wrong .so pages in $build/man/man3:$bad"

# every page renders without a warning: groff with all warnings on, and
# man(1) as a reader would run it (preconv, tbl, the man macros)
for p in "$man"/*.[1-9]; do
	w=$({
		groff -man -Tutf8 -ww -z "$p"
		LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings=w -E UTF-8 -l -Tutf8 -Z "$p" >/dev/null
	} 2>&1)
	[ -z "$w" ] && ok "$(basename "$p") renders without warnings" || ko "$(basename "$p") renders with warnings" "$w"
done

# the committed roff is pandoc's rendering of the markdown beside it
for md in "$man"/*.md; do
	roff=${md%.md}
	[ -f "$roff" ] || { ko "$(basename "$md") has no committed roff (make man)"; continue; }
	if command -v pandoc >/dev/null; then
		if pandoc --standalone --to man "$md" | cmp -s - "$roff"; then ok "$(basename "$roff") is up to date"
		else ko "$(basename "$roff") differs from pandoc's rendering of its .md (run make man)"; fi
	fi
done
command -v pandoc >/dev/null ||
	echo "NOTE pandoc is not installed: the roff was not compared with its markdown"

echo "$pass passed, $fail failed"
[ $fail = 0 ]
