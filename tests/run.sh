#!/bin/sh
# Run each test binary under a timeout; 0 pass, 77 skip, anything else fail.
# A test whose output holds a sanitizer's report fails whatever its exit
# code. The logs of failed tests are kept in $BUILD/test-logs (the others
# are removed). Closing line: N passed, N failed, N skipped
#
# Skips: a test that exits 77 is the skip TEST; a test that goes on past a
# part it cannot run prints "skip-part: PART: reason" (t_skip_part), the
# skip TEST/PART. Both are listed (SKIP lines). With KVT_EXPECTED_SKIPS set
# to a file (tests/expected-skips, as CI does), any skip that file does not
# list for this suite fails, and a listed skip that ran is pointed out (a
# note, not a failure). The suite is $KVT_SUITE, else the last part of
# $BUILD ("build" being "plain"): asan, tsan, plain.
#
# Each test's limit is KVT_TEST_TIMEOUT seconds, else 120 times
# KVT_TEST_SLOW, else 240 when the load average is above the number of
# cpus (the tests scale their own waits alike: t_slow in tests/common.c).
set -f		# skip patterns are matched against names, never expanded
# OpenBLAS's kernels as it picks them, and as kvt-run corrects them: a core
# forced from outside would be kept, by the tools and by the tests' own
# products (t_run checks that kvt-run runs none weaker than the cpu).
unset OPENBLAS_CORETYPE
slow=${KVT_TEST_SLOW:-$(awk -v n="$(nproc 2>/dev/null || echo 1)" \
	'{ s = $1 > n ? 2 : 1; print s; exit }' /proc/loadavg 2>/dev/null || echo 1)}
timeout_s=${KVT_TEST_TIMEOUT:-$((120 * slow))}
keep=${BUILD:-build}/test-logs
suite=${KVT_SUITE:-$(basename "${BUILD:-build}")}
[ "$suite" = build ] && suite=plain
expect=${KVT_EXPECTED_SKIPS:-}
pass=0; fail=0; skip=0; parts=0; failed=""; skipped=" "; ran=" "
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvt-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
if [ -n "$expect" ] && [ ! -r "$expect" ]; then
	echo "run.sh: KVT_EXPECTED_SKIPS=$expect: no such file" >&2
	exit 1
fi

# The patterns of expected skips for this suite, one a line: lines of the
# file "NAME: reason" (every suite) or "NAME@SUITE: reason"; NAME may be a
# shell pattern. Comments (#) and blank lines are ignored.
expected() {
	[ -n "$expect" ] || return 0
	sed -n 's/^\([^#: 	][^: 	]*\):.*/\1/p' "$expect" | while read -r pat; do
		case $pat in
		*@"$suite") echo "${pat%@*}" ;;
		*@*) ;;
		*) echo "$pat" ;;
		esac
	done
}
pats=$(expected)

# Is the skip $1 expected here? Without a file, every skip is.
is_expected() {
	[ -n "$expect" ] || return 0
	for p in $pats; do
		# shellcheck disable=SC2254
		case $1 in $p) return 0 ;; esac
	done
	return 1
}

# Record the skip $1 (reason $2): a SKIP line, or a failure if unexpected.
note_skip() {
	skipped="$skipped$1 "
	if is_expected "$1"; then
		printf 'SKIP  %-28s %s\n' "$1" "$2"
		return 0
	fi
	printf 'FAIL  %-28s skipped, and %s does not list it for %s: %s\n' "$1" "$expect" \
		"$suite" "$2"
	return 1
}

for t in "$@"; do
	name=$(basename "$t")
	ran="$ran$name "
	log="$tmp/$name.log"
	start=$(date +%s.%N)
	KVT_TEST_DIR="$tmp" timeout -k 5 "$timeout_s" "$t" >"$log" 2>&1
	rc=$?
	if [ $rc -eq 0 ] && grep -qE 'runtime error:|ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer' "$log"; then
		rc=99		# a report the test outlived
	fi
	secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
	case $rc in
	0)  pass=$((pass+1)); printf 'PASS  %-28s %6ss\n' "$name" "$secs"
	    # The parts it skipped, each once.
	    for part in $(sed -n 's/^skip-part: \([^: ]*\): .*/\1/p' "$log" | sort -u); do
		parts=$((parts+1))
		why=$(grep -m 1 "^skip-part: $part: " "$log" | cut -d' ' -f3-)
		note_skip "$name/$part" "$why" || { rc=98; failed="$failed $name/$part"; }
	    done
	    [ $rc -eq 98 ] && { pass=$((pass-1)); fail=$((fail+1)); } ;;
	77) if note_skip "$name" "$(tail -n 1 "$log")"; then skip=$((skip+1))
	    else rc=98; fail=$((fail+1)); failed="$failed $name"; fi ;;
	124|137) fail=$((fail+1)); failed="$failed $name"
	    printf 'FAIL  %-28s timed out after %ss\n' "$name" "$timeout_s"; tail -n 20 "$log" ;;
	99) fail=$((fail+1)); failed="$failed $name"
	    printf 'FAIL  %-28s exit 0 with a sanitizer report\n' "$name"
	    grep -m 5 -E 'runtime error:|Sanitizer' "$log" ;;
	*)  fail=$((fail+1)); failed="$failed $name"
	    printf 'FAIL  %-28s exit %s\n' "$name" "$rc"; tail -n 20 "$log" ;;
	esac
	case $rc in
	0|77) ;;
	*) mkdir -p "$keep" && cp "$log" "$keep/" && echo "      log kept: $keep/$name.log" ;;
	esac
done

# Expected skips that did not happen: worth a look (the list may be stale),
# not a failure. Only for tests of this run, and plain names (no pattern).
for p in $pats; do
	case $p in *[\*\?\[]*) continue ;; esac
	case $ran in *" ${p%%/*} "*) ;; *) continue ;; esac
	case $skipped in *" $p "*) ;; *) echo "note: $p is listed in $expect for $suite but did not skip" ;; esac
done

[ $parts -gt 0 ] && echo "$parts parts of passing tests skipped (SKIP lines with a '/')"
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
