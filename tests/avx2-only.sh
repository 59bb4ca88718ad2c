#!/bin/bash
# The AVX2 kernels on a cpu without AVX-512. The kernel suites run every
# simd level this cpu has, the lower ones forced (kvt_cpu_set_simd_max);
# that shows they compute the right numbers, not that they run where
# AVX-512 is absent. Here t_quants and t_kernels run under QEMU's
# user-mode emulation of a Haswell (AVX2, FMA, F16C; no AVX-512), so the
# cpu checks pick the AVX2 paths as such a cpu would, and an AVX-512
# instruction in them would stop the test with SIGILL. Exits 77 without
# qemu-x86_64 (Debian's qemu-user). About 20 s.
set -u
BUILD=${BUILD:-build}
QEMU=${QEMU:-qemu-x86_64}

if ! command -v "$QEMU" > /dev/null 2>&1; then
	echo "avx2-only: no $QEMU here (Debian's qemu-user): nothing checked" >&2
	exit 77
fi
case $(uname -m) in
x86_64) ;;
*) echo "avx2-only: not an x86-64 machine: nothing checked" >&2; exit 77 ;;
esac
# Emulated, the suites run some 20 to 100 times slower: a tenth of their
# loops, and no deadline that assumes real hardware.
export KVT_TEST_SCALE=${KVT_TEST_SCALE:-8} KVT_TEST_SLOW=${KVT_TEST_SLOW:-50} OPENBLAS_NUM_THREADS=1
fail=0
# each suite, and a line its output must hold to show the AVX2 level ran
for t in "t_quants:int8 (AVX2 kernels): every block type" "t_kernels:-- AVX2"; do
	name=${t%%:*} want=${t#*:} log=$BUILD/tests/$name.avx2-only.log
	"$QEMU" -cpu Haswell "$BUILD/tests/$name" > "$log" 2>&1
	rc=$?
	if [ $rc != 0 ]; then
		grep -v '^qemu-x86_64: warning' "$log" | tail -n 20
		echo "avx2-only: $name failed (exit $rc) on an emulated Haswell" >&2
		fail=1
	elif ! grep -qF -- "$want" "$log"; then
		echo "avx2-only: $name did not run its AVX2 kernels (no \"$want\" in $log)" >&2
		fail=1
	elif grep -q -- '-- AVX-512' "$log"; then
		echo "avx2-only: $name ran AVX-512 kernels on a cpu without them" >&2
		fail=1
	else
		echo "avx2-only: $name passed on an emulated Haswell (AVX2, no AVX-512)"
	fi
done
exit $fail
