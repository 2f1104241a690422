# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
# sendfile_hosts ROLE BYTES PORT [CMP]: exs_sendfile of a sparse file of
# BYTES (tests/apps/exs_sfxfer.c "make": holes and 4 MiB of data, the last
# byte included) from guest a to guest b, over rxe and then siw, then CMP
# bytes (default BYTES, 0: none) by exs_send from a registered buffer for
# comparison. Both guests
# make the same file from the same seed: b checks the sum of the stream it
# received against its own copy's, a sends its copy. Sourced by the
# two-host scripts after lib.sh; each side counts its own checks.
sendfile_hosts() {
	local role=$1 bytes=$2 port=$3 cmp=${4:-$2} file=/tmp/exs-sf.bin t peer ip dev p log want got
	local size=$((bytes >> 20))MiB
	# siw counts the pinned windows against RLIMIT_MEMLOCK even for root
	ulimit -l unlimited
	if ! timeout 120 "$B/tests/exs_sfxfer" make $file "$bytes" 31; then
		fail "$role: making the sparse file of $size"
		return
	fi
	# b's sum of its copy first: once a has sent its last byte, exs-vm
	# gives b only a short grace
	[ "$role" = b ] && want=$(timeout 600 "$B/tests/exs_sfxfer" sum $file | cut -d' ' -f2)
	for t in rxe siw; do
		p=$port
		[ $t = siw ] && p=$((port + 1))
		if [ $t = rxe ]; then ip=$EXS_VM_RXE_IP peer=$EXS_VM_RXE_PEER dev=$EXS_VM_RXE_DEV
		else ip=$EXS_VM_SIW_IP peer=$EXS_VM_SIW_PEER dev=$EXS_VM_SIW_DEV; fi
		log=$LOGS/sf-$t.$role
		if [ "$role" = b ]; then
			timeout 1500 "$B/tests/exs_sfxfer" recv "$ip" $p "$bytes" -c "$cmp" >$log 2>&1
			local rc=$?
			got=$(sed -n 's/^recv exs_sendfile .* sum \([0-9a-f]*\)$/\1/p' $log)
			if [ $rc = 0 ] && [ -n "$want" ] && [ "$got" = "$want" ]; then
				pass "two hosts: exs_sendfile of a sparse $size file over $dev: every byte (sum $got)"
			else
				fail "two hosts: exs_sendfile of $size over $dev: exit $rc, sum ${got:-none}, file's ${want:-none}"
			fi
		else
			if timeout 1500 "$B/tests/exs_sfxfer" send "$peer" $p $file -c "$cmp" -r 600 >$log 2>&1; then
				pass "two hosts: exs_sendfile of a sparse $size file sent over $dev"
			else
				fail "two hosts: exs_sendfile of $size over $dev"
			fi
		fi
		sed 's/^/    /' $log
	done
	rm -f $file
}
