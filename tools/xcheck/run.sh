#!/bin/bash
# SPDX-License-Identifier: MIT
#
# make xcheck: kvt-run's logits against llama.cpp's, on models kvt-mkmodel
# writes. llama.cpp is the prebuilt CPU build in the npm package
# node-llama-cpp, at the versions package-lock.json here fixes (85 MB,
# installed with `npm ci` into $BUILD/xcheck on first use and again when
# the lock file changes; the platform builds that --omit=optional leaves
# out, mac, win and riscv64, are in it by version only). Exit 0: every run within its limits; 77: skipped,
# having checked nothing, because node >= 20, npm or the package (no npm
# registry to install it from) is missing; anything else: a failure, a
# usage error in the check included. Each model, prompt (50 and 450 ids) and
# KV type is decoded greedily for 8 tokens by both engines, ours through the
# dense path and through the pager (and once with tiers too small for the
# KV, so that pages come back from NVMe); every logits row is compared.
# First, the tokenizer: `kvt-run --tokenize` against llama.cpp's on texts
# from this tree, a few edge cases and a text of many scripts, for the
# kinds kvt-mkmodel writes: the SentencePiece-style "llama" vocabulary
# (byte fallback), and byte-level BPE ("gpt2") split by Llama 3's pattern
# (pre llama-bpe), by GPT-2's (pre gpt-2) and by Qwen2's (pre qwen2).
#
# Limits (worst of max|ours - llama| / max|llama| over a run's rows; each
# engine feeds back its own greedy token, so rows after the first whose
# argmax differs are not compared):
#   f32 weights, f32 KV   1e-5, same argmax (float rounding only)
#   f32 weights, f16 KV   1e-3, same argmax (llama.cpp also rounds Q and the
#                         softmax weights to f16 in its attention products)
#   f16 / bf16 / q8_0     3e-3 / 2e-2 / 5e-2: llama.cpp rounds a matmul's
#                         activations to the weight's type; we keep them f32
#                         (same argmax required for f16 only)
#   q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k and the q4_k_m mix
#                         5e-2 as q8_0 (llama.cpp rounds the activations to
#                         q8_0 or q8_k for these, and so does kvt-run's
#                         decode for all of them where the cpu has AVX2,
#                         kernels/cpu/qdots.h)
#   q8_0 KV              5e-3 with f32 weights, 5e-2 with q8_0 (below)
#   q4_0 KV              1e-2 with f32 weights, 8e-2 with q4_0 (below)
#   the block types again with kvt-run on its AVX2 kernels (KVT_SIMD=1,
#                         rows marked -avx2) and on AVX512-BF16 dots in
#                         the prefill (KVT_AMX=dots, rows marked -dots,
#                         where the cpu has them): 5e-2
#   the same weights dequantized to f32 (tof32.py), f32 KV: 1e-5, same
#                         argmax: how each engine reads the weights, alone
#                         (kvt-run with f32 activations: KVT_EXACT_DOTS=1)
set -euo pipefail

src=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${BUILD:-build}" && pwd)
W=$BUILD/xcheck
RUN=$BUILD/kvt-run
N=8

# 77 means skipped only when skip() says so: a command that fails under
# set -e with 77 of its own is a failure like any other.
skipping=0
skip() {
	echo "xcheck: skipped: $*" >&2
	skipping=1
	exit 77
}
trap 'rc=$?; [ $rc = 77 ] && [ $skipping = 0 ] && exit 1; exit $rc' EXIT

mkdir -p "$W"
if ! command -v node >/dev/null || ! command -v npm >/dev/null ||
   ! node -e 'process.exit(+process.versions.node.split(".")[0] >= 20 ? 0 : 1)'; then
	skip "this check needs node >= 20 and npm"
fi
# node_modules/.kvt-lock: the lock file it was installed from.
if ! cmp -s "$src/package-lock.json" "$W/node_modules/.kvt-lock"; then
	echo "xcheck: installing node-llama-cpp (llama.cpp's prebuilt CPU build) into $W with npm ci"
	cp "$src/package.json" "$src/package-lock.json" "$W/"
	timeout 60 npm ping >/dev/null 2>&1 ||
		skip "the npm registry does not answer: this check needs it to install node-llama-cpp"
	(cd "$W" && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true timeout 600 npm ci --omit=optional \
		--no-audit --no-fund >/dev/null) || {
		echo "xcheck: npm ci failed in $W (see the log above)" >&2
		exit 1
	}
	cp "$src/package-lock.json" "$W/node_modules/.kvt-lock"
fi
cp "$src/logits.mjs" "$src/tokenize.mjs" "$W/"
cd "$W"
rm -f l-*.bin o-*.bin

python3 -c '
import random
for n, seed in ((50, 7), (450, 10)):
    random.seed(seed)
    open(f"p{n}.txt", "w").write(" ".join(str(random.randint(3, 500)) for _ in range(n)))'

base="--layers 2 --dim 128 --heads 4 --kv-heads 2 --ff 384 --vocab 512 --ctx 512"
mk() { "$BUILD/kvt-mkmodel" "$@" >/dev/null; }
mk $base --type f32 -o f32.gguf
mk $base --type f16 -o f16.gguf
mk $base --type bf16 -o bf16.gguf
mk $base --type q8_0 -o q8_0.gguf
# The other block types: those of 32 on the same geometry, the _K types
# (blocks of 256) on one whose rows are whole blocks.
QTYPES="q4_0 q4_1 q5_0 q5_1 q2_k q3_k q4_k q5_k q6_k q4_k_m"
kbase="--layers 2 --dim 256 --heads 4 --kv-heads 2 --ff 768 --vocab 512 --ctx 512"
for t in q4_0 q4_1 q5_0 q5_1; do mk $base --type $t -o $t.gguf; done
for t in q2_k q3_k q4_k q5_k q6_k q4_k_m; do mk $kbase --type $t -o $t.gguf; done
mk $kbase --type q4_k_m --arch qwen2 -o qwen2-q4km.gguf
QTYPES="$QTYPES qwen2-q4km"
mk $base --type f32 --tied -o tied.gguf
mk $base --type f32 --rope-freqs llama3 -o llama3.gguf
mk --layers 3 --dim 256 --heads 4 --ff 704 --vocab 512 --ctx 512 --seed 5 --type f32 -o mha.gguf
# Sixteen heads of 64, two to a KV head: decode reads a page sixteen
# heads at once (the cpu's rowpage kernels; f32, f16 and q8_0 KV).
mk --layers 2 --dim 1024 --heads 16 --kv-heads 8 --ff 512 --vocab 512 --ctx 512 --type f32 -o h16.gguf
mk $base --type f32 --tokenizer gpt2 --pre llama-bpe -o bpe.gguf
mk $base --type f32 --tokenizer gpt2 --pre gpt-2 -o bpe-gpt2.gguf
mk $base --type f32 --tokenizer gpt2 --pre qwen2 -o bpe-qwen2.gguf
# Qwen2: biases, NEOX RoPE, its tokenizer; tied as its small models are.
mk $base --type f32 --arch qwen2 -o qwen2.gguf
mk $base --type f32 --arch qwen2 --tied -o qwen2t.gguf
for t in f16 bf16 q8_0 $QTYPES; do
	python3 "$src/tof32.py" $t.gguf $t-asf32.gguf
done

fails=0
root=$(cd "$src/../.." && pwd)
cp "$root/README.md" t-readme.txt
head -n 250 "$root/pager/pager.c" > t-code.txt
printf '  Leading spaces,\n\nnewlines\ttabs   and   runs.\r\nUnicode: caf\xc3\xa9, \xe6\x9d\xb1\xe4\xba\xac, \xf0\x9f\x9a\x80.\n' > t-edge.txt
printf ' ' > t-space.txt
# Beyond ASCII: accents, CJK and an ideographic space, Hangul, Cyrillic,
# Greek, Arabic with Arabic-Indic digits, Devanagari digits, emoji, a
# vulgar fraction and a Roman numeral (numbers that are not digits), a
# superscript, a no-break space and an em space, a combining accent, and
# full-width digits.
printf 'Caf\xc3\xa9 cr\xc3\xa8me br\xc3\xbbl\xc3\xa9e, na\xc3\xafve Z\xc3\xbcrich \xc3\x85ngstr\xc3\xb6m.\n\xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xa8\xe5\xa4\xa7\xe9\x98\xaa\xe3\x80\x82\xe3\x80\x80\xed\x95\x9c\xea\xb5\xad\xec\x96\xb4 \xd0\xbf\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xce\xba\xcf\x8c\xcf\x83\xce\xbc\xce\xb5 \xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd9\xa3\xd9\xa4\xd9\xa5 \xe0\xa5\xa8\xe0\xa5\xa6\xe0\xa5\xa8\xe0\xa5\xac\n\xf0\x9f\x9a\x80\xf0\x9f\x8e\x89 emoji\xf0\x9f\x98\x80! \xc2\xbd \xe2\x85\xa2 x\xc2\xb2 \xc2\xa0nbsp\xe2\x80\x83em-space e\xcc\x81 1234567 \xef\xbc\x91\xef\xbc\x92\xef\xbc\x93\n' > t-unicode.txt
printf "Numbers 1234567 and 3.14159, isn't it? DON'T.\n\n\tIndented (brackets) -- dashes...\n" > t-bpe.txt
for m in f32 bpe bpe-gpt2 bpe-qwen2; do
for t in t-readme t-code t-edge t-space t-bpe t-unicode; do
	ours=$("$RUN" -m $m.gguf -f $t.txt --tokenize) &&
		theirs=$(node tokenize.mjs $m.gguf $t.txt) || {
		echo "tokenizer: $m $t.txt: a run failed"
		fails=$((fails + 1))
		continue
	}
	if [ "$ours" = "$theirs" ]; then
		echo "tokenizer: $m $t.txt: the same $(echo $ours | wc -w) ids"
	else
		echo "tokenizer: $m $t.txt: DIFFERENT"
		echo "  kvt-run:   $(echo $ours | head -c 400)"
		echo "  llama.cpp: $(echo $theirs | head -c 400)"
		fails=$((fails + 1))
	fi
done
done
printf "%-10s %-6s %-4s %-7s %-30s %s\n" model prompt kv path "against llama.cpp" limit
# check MODEL REF_MODEL PROMPT KV LIMIT ARGMAX PATH...: llama.cpp on REF_MODEL,
# kvt-run on MODEL through each path.
check() {
	local m=$1 ref=$2 p=$3 kv=$4 lim=$5 am=$6
	shift 6
	local l=l-$ref-$p-$kv.bin
	[ -f "$l" ] || node logits.mjs $ref.gguf $p.txt $N $l --kv $kv >/dev/null || {
		echo "llama.cpp failed on $ref $p $kv"
		fails=$((fails + 1))
		return
	}
	for path in "$@"; do
		local o=o-$m${TAG:-}-$p-$kv-$path.bin extra=()
		case $path in
		dense) extra=(--dense) ;;
		nvme) extra=(--fast 64K --host 64K --nvme-path "$W") ;;
		esac
		"$RUN" -m $m.gguf --prompt-ids $p.txt -n $N --temp 0 --ignore-eos -t 1 --no-progress \
			--kv-type $kv --dump-logits $o --json "${extra[@]}" >o.json 2>o.err ||
			{ echo "kvt-run failed on $m $p $kv $path:"; cat o.err; fails=$((fails + 1)); continue; }
		if [ $path = nvme ] && ! python3 -c 'import json, sys
sys.exit(json.load(open("o.json"))["pager"]["nvme_ops"] == 0)'; then
			echo "kvt-run read nothing from NVMe on $m $p $kv $path"
			fails=$((fails + 1))
		fi
		local r
		r=$(python3 "$src/cmp.py" $o $l 512 --max-rel $lim $am) || fails=$((fails + 1))
		printf "%-10s %-6s %-4s %-7s %-30s %s\n" "$m${ref/#$m/}${TAG:-}" $p $kv $path "$r" $lim
	done
}
for p in p50 p450; do
	for kv in f32 f16; do
		for m in f32 tied llama3 mha bpe qwen2 qwen2t h16; do
			lim=1e-5; [ $kv = f16 ] && lim=1e-3
			check $m $m $p $kv $lim --argmax dense tiered
		done
		check f16 f16 $p $kv 3e-3 --argmax dense tiered
		check bf16 bf16 $p $kv 2e-2 "" dense tiered
		check q8_0 q8_0 $p $kv 5e-2 "" dense tiered
	done
done
# q8_0 KV, both engines (llama.cpp with flash attention, which it needs
# for a quantized V): measured 9.4e-4 to 2.0e-3 with f32 weights, 1.4e-2
# with q8_0 weights; llama.cpp's own q8_0 KV against its f16 KV differs
# by 3.4e-3 to 2.4e-2 on the same models.
for m in f32 qwen2; do
	check $m $m p450 q8_0 5e-3 --argmax dense tiered
done
# Sixteen heads of 64: measured 1.0e-2, where llama.cpp's own q8_0 KV
# against its f16 KV differs by 9.1e-3 (and its q4_0 KV's argmax by the
# second token, so q4_0 is not checked on it).
check h16 h16 p450 q8_0 2e-2 --argmax dense tiered
check q8_0 q8_0 p450 q8_0 5e-2 "" dense tiered
# q4_0 KV, both engines, the same way: measured 1.9e-3 to 3.4e-3 with f32
# weights, 5.2e-2 with q4_0 weights (where llama.cpp rounds the
# activations and, for its dot with q4_0 K, Q to q8_0; kvt-run keeps Q in
# f32); llama.cpp's own q4_0 KV against its f16 KV differs by 5.4e-2 to
# 1.1e-1 on the same models.
for m in f32 qwen2; do
	check $m $m p450 q4_0 1e-2 --argmax dense tiered
done
check q4_0 q4_0 p450 q4_0 8e-2 "" dense tiered
check f32 f32 p450 f32 1e-5 --argmax nvme
check f32 f32 p450 f16 1e-3 --argmax nvme
for t in $QTYPES; do
	check $t $t p450 f16 5e-2 "" dense tiered
done
# The AVX2 kernels end to end (KVT_SIMD=1: integer dots on 256-bit
# vectors, sgemm for the prefill), as a cpu without AVX-512 runs them.
for t in q8_0 $QTYPES; do
	KVT_SIMD=1 TAG=-avx2 check $t $t p450 f16 5e-2 "" dense
done
# The prefill's AVX512-BF16 dots (KVT_AMX=dots), as a cpu with them and
# no AMX tiles runs it (AMD Zen 4), where this cpu has them.
if grep -qw avx512_bf16 /proc/cpuinfo; then
	for t in q8_0 $QTYPES; do
		KVT_AMX=dots TAG=-dots check $t $t p450 f16 5e-2 "" dense
	done
fi
# How each engine reads the weights, alone: kvt-run keeps f32 activations
# here (KVT_EXACT_DOTS), as the f32 copy has no integer dots to take.
for t in f16 bf16 q8_0 $QTYPES; do
	KVT_EXACT_DOTS=1 check $t $t-asf32 p450 f32 1e-5 --argmax dense tiered
done
if [ $fails -ne 0 ]; then
	echo "xcheck: $fails run(s) outside their limits"
	exit 1
fi
echo "xcheck: every run within its limits"
