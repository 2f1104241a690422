#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# The long two-host exs_sendfile test (vm_sendfile_long, label "long"): a
# sparse file of 1.25 GiB (past UNH EXS's 1 GiB limit) from guest a to
# guest b over rxe and siw, every byte checked, with its time and rate
# (measured under TCG, two guests on a loaded host, two runs: 7.3-7.9 MB/s
# on rxe, 170-183 s; 3.8-4.1 MB/s on siw, 328-349 s; about 10 minutes).
# vm_two_hosts runs the same with 64 MiB, and compares with exs_send.
set -u
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/sendfile-hosts.sh"
role=${1:?a or b}

start_exsd "$role" || { fail "exsd start on $role"; summary; exit 1; }
sendfile_hosts "$role" $((1280 << 20)) 7600 0
stop_exsd "$role"
summary
