#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The long two-host exs_sendfile test (vm_sendfile_long, label "long"): a
# sparse file of 1.25 GiB (past UNH EXS's 1 GiB limit) from guest a to
# guest b over rxe and siw, every byte checked, with the time and rate of
# exs_sendfile and of exs_send from a registered buffer. vm_two_hosts runs
# the same with 64 MiB.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sendfile-hosts.sh"
role=${1:?a or b}

start_exsd "$role" || { fail "exsd start on $role"; summary; exit 1; }
sendfile_hosts "$role" $((1280 << 20)) 7600
stop_exsd "$role"
summary
