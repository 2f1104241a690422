#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# exs_connect with a NULL timeout waits until the peer accepts (guide §4.2,
# "wait indefinitely"; exs_connect(3)): a client queued in a listener's
# backlog that only accepts after QUEUED_MS (63 s), past a minute and past
# exsd's connect_timeout_ms (30 s by default), must connect then. On rxe0:
# siw's own MPA exchange gives up after about 10 s, which vm_config shows;
# rxe's CM stops resending the request in the end too (by rdma_cm's
# constants, 16 tries of about 4.3 s, near 69 s: not measured here).
# Run by `ctest -R vm_queued` (label long) through tests/vm/exs-vm.
set -u
. "$(dirname "$0")/lib.sh"
LATE=${QUEUED_MS:-63000}
start_exsd_conf queued <<CONF
CONF
port=7690
timeout $((LATE / 1000 + 60)) "$B/tests/exs_conf" accept "$EXS_VM_RXE_IP" $port "$LATE" \
	>"$LOGS/queued.server" 2>&1 &
sp=$!
wait_for "$LOGS/queued.server" "ready pid" 20
out=$(timeout $((LATE / 1000 + 50)) "$B/tests/exs_conf" connect "$EXS_VM_RXE_IP" $port -1 2>&1)
t=${out##* }
echo "    client: $out; server: $(tr '\n' ' ' <"$LOGS/queued.server")"
if [[ $out == "connect: ok "* ]] && [ "$t" -gt 60000 ]; then
	pass "rxe: a NULL timeout waited $t ms in the backlog and connected when accepted"
else
	fail "rxe: a NULL timeout queued for $LATE ms: $out"
fi
wait $sp && grep -q "accept: ok" "$LOGS/queued.server" && pass "rxe: the late accept took it" ||
	fail "rxe: the late accept: $(tr '\n' ' ' <"$LOGS/queued.server")"
stop_exsd queued
summary
