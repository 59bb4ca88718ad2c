#!/bin/sh
# Run each test binary under a timeout; 0 pass, 77 skip, anything else fail.
# A test whose output holds a sanitizer's report fails whatever its exit
# code. The logs of failed tests are kept in $BUILD/test-logs (the others
# are removed). Closing line: N passed, N failed, N skipped
timeout_s=${KVT_TEST_TIMEOUT:-120}
keep=${BUILD:-build}/test-logs
pass=0; fail=0; skip=0; failed=""
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvt-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
for t in "$@"; do
	name=$(basename "$t")
	log="$tmp/$name.log"
	start=$(date +%s.%N)
	KVT_TEST_DIR="$tmp" timeout -k 5 "$timeout_s" "$t" >"$log" 2>&1
	rc=$?
	if [ $rc -eq 0 ] && grep -qE 'runtime error:|ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer' "$log"; then
		rc=99		# a report the test outlived
	fi
	secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN{printf "%.2f", b-a}')
	case $rc in
	0)  pass=$((pass+1)); printf 'PASS  %-28s %6ss\n' "$name" "$secs" ;;
	77) skip=$((skip+1)); printf 'SKIP  %-28s %s\n' "$name" "$(tail -n 1 "$log")" ;;
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
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
