#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The conformance suite (tests/apps/exs_conform.c: one check per behaviour
# of the programmer's guide, each naming its section) against the real exsd,
# once over rxe0 (RoCE) and once over siw0 (iWARP). Run by ctest through
# tests/vm/exs-vm.
set -u
. "$(dirname "$0")/lib.sh"

start_exsd conform || exit 1
for dev in rxe siw; do
	ip=$EXS_VM_RXE_IP port=20000
	[ $dev = siw ] && ip=$EXS_VM_SIW_IP port=21000
	out=$LOGS/conform-$dev.log
	timeout $((300 * ${EXS_SLOW:-1})) "$B/tests/exs_conform" "$ip" $port >"$out" 2>&1
	rc=$?
	sed "s/^/    [$dev] /" "$out"
	n=$(grep -c '^PASS' "$out")
	if [ $rc = 0 ] && [ "$n" -gt 100 ]; then
		pass "conformance on ${dev}0: $n checks ($(tail -n 1 "$out"))"
	else
		fail "conformance on ${dev}0: exit $rc, $n checks passed"
	fi
done
stop_exsd conform
summary
