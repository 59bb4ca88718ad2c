#!/bin/sh
# Write the seed corpora under tests/fuzz/corpus/ with the project's own
# writers (kvt-mkmodel, kvt-run, kvt-sim, kvt-trace from BUILD, default
# build/), plus a few hand-made edge cases. Run from the repository root
# after `make tools`; the files it writes are committed. Regression inputs
# (regress-*) are kept by hand and never overwritten.
set -eu
B=${BUILD:-build}
C=tests/fuzz/corpus
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvt-seed.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
mkdir -p $C/gguf $C/tokenizer $C/trace $C/import $C/config $C/control $C/session $C/http

# GGUF: the smallest models kvt-mkmodel writes, both tokenizers, a block
# type, and a file of a header alone.
$B/kvt-mkmodel --layers 1 --dim 8 --heads 2 --ff 8 --ctx 64 --vocab 259 -o $C/gguf/mkmodel-llama.gguf >/dev/null
$B/kvt-mkmodel --layers 1 --dim 8 --heads 2 --kv-heads 1 --ff 8 --ctx 64 --vocab 258 \
	--tokenizer gpt2 --tied -o $C/gguf/mkmodel-gpt2.gguf >/dev/null
$B/kvt-mkmodel --layers 1 --dim 32 --heads 2 --ff 32 --ctx 64 --vocab 259 --type q4_0 \
	--arch qwen2 -o $C/gguf/mkmodel-qwen2-q4_0.gguf >/dev/null
printf 'GGUF\003\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000' \
	> $C/gguf/empty.gguf

# Tokenizer (tests/fuzz/fuzz_tokenizer.c): flags, vocabulary length
# (2 bytes), vocabulary lines, text.
tok() {	# NAME FLAGS VOCAB TEXT
	n=$(printf '%s' "$3" | wc -c)
	{ printf "\\$(printf '%03o' "$2")\\$(printf '%03o' $((n % 256)))\\$(printf '%03o' $((n / 256)))"
	  printf '%s' "$3"; printf '%s' "$4"; } > $C/tokenizer/$1
}
tok llama 6 "$(printf '<unk>\n<s>\n</s>\n<0x41>\n<0x0A>\n\342\226\201\na\nb\nab\n\342\226\201a\n\342\226\201ab\nc')" "ab abc A
 ca"
tok llama-bytes 0 "$(printf '<unk>\n<0x61>\n<0xE2>\n<0x96>\n<0x81>\n\342\226\201')" "a aa Ã©"
tok gpt2 1 "$(printf 'a\nb\nab\n\304\240\n\304\240a\na b\n\304\240 a')" "ab a ba's 12"
tok gpt2-llama3 13 "$(printf '!\na\nb\n\304\240\nab\na b\n\304\240 a\n\304\240a')" "I'm 1234 ab, ab!"
tok gpt2-qwen2 17 "$(printf 'a\n1\n2\n12\n1 2\n\304\240')" "a 12 1 2"

# Traces: one the pager recorded (kvt-run --trace), generated ones
# (kvt-sim gen) and an oracleGeneral file (kvt-trace export).
$B/kvt-run -m $C/gguf/mkmodel-llama.gguf -p "ab" -n 3 --page-tokens 128 --fast 64K --host 512K \
	--nvme 0 --trace $C/trace/kvt-run.trace --no-progress >/dev/null 2>&1
$B/kvt-sim gen scan --layers 2 --pages 3 --append-every 2 --steps 4 -o $C/trace/scan.trace >/dev/null
$B/kvt-sim gen zipf --requests 40 --objects 8 -o $C/trace/zipf.trace >/dev/null
$B/kvt-trace export oracle $C/trace/scan.trace $tmp/scan.oracle >/dev/null
cp $tmp/scan.oracle $C/trace/scan.oracle

# Imports (tests/fuzz/fuzz_import.c): byte 0 even for oracleGeneral, odd
# for Mooncake JSONL.
{ printf '\000'; cat $tmp/scan.oracle; } > $C/import/oracle
printf '\000' > $C/import/oracle-empty
printf '\001' > $C/import/mooncake-empty
{ printf '1'; printf '%s\n' \
	'{"timestamp": 0, "input_length": 1024, "output_length": 10, "hash_ids": [1, 2]}' \
	'' \
	'{"timestamp": 27.5, "input_length": 512, "output_length": 3, "hash_ids": [1, 3], "x": {"y": [null, true, "s\u00e9\n"]}}'; } \
	> $C/import/mooncake

# Configuration: the example file, what kvt-run prints, and --set lines.
cp kvt.ini.example $C/config/kvt.ini.example
$B/kvt-run -m $C/gguf/mkmodel-llama.gguf -p x --page-tokens 128 --print-config \
	> $C/config/print-config.ini
printf '%s\n' 'tier.fast.bytes=64M' 'tier.host.policy=s3fifo:small=20' 'io.max_io_bytes=1M' \
	'psi.threshold=12.5' 'host.numa_node=auto' 'geometry.dtype=bf16' 'device.copy_gbps=1e3' \
	> $C/config/set-lines

# Control protocol lines.
printf '%s\n' help stats 'stats json' metrics 'get tier.fast.policy' 'get io.depth' \
	'set tier.fast.policy=clock' 'set tier.host.wm_low=5' 'set tier.fast.bytes=2K' \
	'drain fast' 'drain host' 'trace stop' 'trace start rel' 'bogus' > $C/control/all
printf 'stats\r\n\n  get   tier.host.bytes  \nset io.depth=8\n' > $C/control/odd

# A session kvt-run saved over the fuzz target's model (2 layers, width
# 32, 2 heads, the smallest vocabulary); byte 0 is the target's mode.
$B/kvt-mkmodel --layers 2 --dim 32 --heads 2 --ff 64 --ctx 64 --vocab 259 -o $tmp/s.gguf >/dev/null
$B/kvt-run -m $tmp/s.gguf --prompt-ids /dev/stdin -n 1 --ctx 32 --page-tokens 32 --fast 64K \
	--host 512K --nvme 0 --save $tmp/s.session --no-progress >/dev/null 2>&1 <<EOT
1 100 200
EOT
{ printf '\000'; cat $tmp/s.session; } > $C/session/kvt-run
{ printf '\003'; head -c 48 $tmp/s.session; } > $C/session/header-only

# HTTP requests.
printf 'GET /metrics HTTP/1.1\r\nHost: localhost\r\nAccept: */*\r\n\r\n' > $C/http/get
printf 'HEAD /metrics?x=1 HTTP/1.0\n\n' > $C/http/head
printf 'POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n' > $C/http/post
printf 'GET / HTTP/1.1\r\n\r\n' > $C/http/not-found
printf 'GET  /metrics HTTP/1.1\r\nbad header\r\n\r\n' > $C/http/bad
echo "seeds written under $C"
