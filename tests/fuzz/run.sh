#!/bin/sh
# Run fuzz targets one after another: run.sh BUILD SECONDS NAME...
# Each runs SECONDS seconds on one core from its corpus in the tree
# (tests/fuzz/corpus/NAME, read only) and a working corpus in
# BUILD/corpus/NAME (where libFuzzer keeps what it finds). A crash, a
# sanitizer report, a leak, an input over 10 s (a hang) or over 2 GiB
# fails the target: its input is kept as BUILD/crash-NAME-* and the log
# as BUILD/NAME.log. One line per target: its runs and what it found.
# Closing line: N passed, N failed.
build=$1 secs=$2
# The kernels run OpenBLAS on one thread; its idle threads would only spin.
export OPENBLAS_NUM_THREADS=1
shift 2
pass=0 fail=0 failed=""
for name in "$@"; do
	bin=$build/$name
	seeds=tests/fuzz/corpus/${name#fuzz_}
	work=$build/corpus/${name#fuzz_}
	log=$build/$name.log
	mkdir -p "$work" "$seeds"
	dict=""
	[ -f "tests/fuzz/${name#fuzz_}.dict" ] && dict="-dict=tests/fuzz/${name#fuzz_}.dict"
	rc=0
	"$bin" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$build/crash-${name#fuzz_}-" $dict "$work" "$seeds" >"$log" 2>&1 || rc=$?
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1)
	if [ $rc -eq 0 ]; then
		pass=$((pass+1))
		printf 'PASS  %-16s %10s runs in %ss, %s\n' "$name" "${runs:-?}" "$secs" "${cov:-cov: ?}"
	else
		fail=$((fail+1)); failed="$failed $name"
		printf 'FAIL  %-16s exit %s after %s runs\n' "$name" "$rc" "${runs:-?}"
		grep -m 3 -E 'ERROR:|runtime error:|FUZZ_CHECK|Test unit written' "$log" | sed 's/^/      /'
		echo "      log: $log; replay: $bin $build/crash-${name#fuzz_}-*"
	fi
done
[ -n "$failed" ] && echo "failed:$failed"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
