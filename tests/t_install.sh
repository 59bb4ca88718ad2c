#!/bin/sh
# SPDX-License-Identifier: MIT
# make install into a temporary DESTDIR, then use what it put there as an
# outside project would: a program built through pkg-config (kvt.pc, its
# prefix pointed into DESTDIR) against libkvt.so and against libkvt.a,
# the policy example built from the installed headers and run by the
# installed kvt-sim and by the program's pager, the tools' --version and
# man pages, the CUDA plug-in's search from bin/ to lib/kvt/; then make
# uninstall, which must leave nothing of ours and everything else.
# Run from the tree's root with BUILD set (tests/run.sh does both);
# KVT_MAKE_VARS holds the build's make variables (SAN=..., CUDA=...).
# Exit 0 pass, 1 fail, 77 skip.
build=${BUILD:-build}
root=$(pwd)
fail() { echo "t_install: $*" >&2; exit 1; }
skip() { echo "t_install: $*"; exit 77; }

[ -f Makefile ] && [ -f include/kvt/version.h ] || fail "run me from the tree's root"
command -v pkg-config > /dev/null || skip "no pkg-config"
command -v readelf > /dev/null || skip "no readelf"
[ -x "$build/kvt-run" ] || fail "$build/kvt-run is not built: make all first"

tmp=$(mktemp -d "${KVT_TEST_DIR:-${TMPDIR:-/tmp}}/t_install.XXXXXX") || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest
prefix=/opt/kvt
top=$dest$prefix
version=$(sed -n 's/^#define KVT_VERSION_STRING[[:space:]]*"\(.*\)"$/\1/p' include/kvt/version.h)
major=${version%%.*}
[ -n "$version" ] || fail "no KVT_VERSION_STRING in include/kvt/version.h"

# The make that ran the suite must not hand its job server down to ours.
unset MAKEFLAGS MFLAGS MAKELEVEL KVT_PLUGIN_DIR
mk() {
	# shellcheck disable=SC2086 # KVT_MAKE_VARS is a list of words
	make --no-print-directory BUILD="$build" PREFIX="$prefix" DESTDIR="$dest" \
		${KVT_MAKE_VARS:-} "$@" > "$tmp/make.log" 2>&1 || {
		cat "$tmp/make.log" >&2; fail "make $* failed"; }
}
mk install

# ---- what install put there ------------------------------------------
for f in include/kvt/pager.h include/kvt/config.h include/kvt/device.h \
	 include/kvt/version.h include/kvt/plugin/pager/policy.h \
	 include/kvt/plugin/pager/policies.h include/kvt/plugin/pager/policy/helpers.h \
	 include/kvt/plugin/pager/policy/list.h lib/libkvt.a "lib/libkvt.so.$version" \
	 lib/pkgconfig/kvt.pc lib/kvt/layerlru.so; do
	[ -f "$top/$f" ] || fail "install did not put $prefix/$f"
done
[ "$(readlink "$top/lib/libkvt.so.$major")" = "libkvt.so.$version" ] ||
	fail "lib/libkvt.so.$major is not a link to libkvt.so.$version"
[ "$(readlink "$top/lib/libkvt.so")" = "libkvt.so.$major" ] ||
	fail "lib/libkvt.so is not a link to libkvt.so.$major"
readelf -d "$top/lib/libkvt.so.$version" | grep -q "SONAME.*\[libkvt\.so\.$major\]" ||
	fail "libkvt.so.$version has no soname libkvt.so.$major"
[ -f "$build/libkvt-cuda.so" ] && { [ -f "$top/lib/kvt/libkvt-cuda.so" ] ||
	fail "the CUDA plug-in was built but not installed in lib/kvt"; }

# The tools: each installed, each saying its version, each with a man
# page that holds every line of its --help.
tools="kvt-run kvtctl kvt-sim kvt-trace kvt-bench kvt-mkmodel kvt-demo"
for t in $tools; do
	[ -x "$top/bin/$t" ] || fail "install did not put $prefix/bin/$t"
	"$top/bin/$t" --version > "$tmp/v" 2>&1 || fail "$t --version failed: $(cat "$tmp/v")"
	[ "$(head -n 1 "$tmp/v")" = "$t (kvtier) $version" ] ||
		fail "$t --version says '$(head -n 1 "$tmp/v")', not '$t (kvtier) $version'"
	grep -q '^features: cuda plug-in \(built\|not built\), simd [a-z0-9]*$' "$tmp/v" ||
		fail "$t --version has no features line: $(cat "$tmp/v")"
	page=$top/share/man/man1/$t.1
	[ -f "$page" ] || fail "install did not put $prefix/share/man/man1/$t.1"
	if command -v groff > /dev/null; then
		# Rendered wide, so that no line is broken; compared without
		# the indentation and the "usage: " that SYNOPSIS drops.
		groff -man -Tascii -rLL=300n "$page" 2> "$tmp/groff.err" | col -bx |
			sed 's/^ *//' > "$tmp/man.txt"
		[ -s "$tmp/groff.err" ] && fail "groff on $t.1: $(cat "$tmp/groff.err")"
		"$top/bin/$t" --help | sed -e 's/^usage: //' -e 's/^ *//' | grep -v '^$' |
			while IFS= read -r line; do
				grep -qxF -- "$line" "$tmp/man.txt" || {
					echo "$t.1 lacks the --help line: $line" >&2; exit 1; }
			done || fail "$t.1 does not say what $t --help says"
		grep -qxF -- "--version" "$tmp/man.txt" 2> /dev/null ||
			grep -qF -- "--version" "$tmp/man.txt" || fail "$t.1 does not mention --version"
	fi
done

# ---- kvt.pc, with its prefix moved into DESTDIR -------------------------
export PKG_CONFIG_PATH="$top/lib/pkgconfig"
pc() { pkg-config --define-variable=prefix="$top" "$@" kvt; }
[ "$(pc --modversion)" = "$version" ] || fail "kvt.pc says version $(pc --modversion)"
pc --cflags > /dev/null || fail "pkg-config --cflags kvt failed"
case " $(pc --cflags) " in
*" -I$top/include "*) ;;
*) fail "pkg-config --cflags kvt: $(pc --cflags) does not name $top/include" ;;
esac

# A sanitizer build's library needs its runtime in the program too.
# shellcheck disable=SC2086
san=$(printf '%s\n' ${KVT_MAKE_VARS:-} | sed -n 's/^SAN=\(..*\)/-fsanitize=\1/p')

# The policy example, from the installed headers only (a copy outside the
# tree, so no header of the tree is near it).
cp docs/examples/policy_example.c "$tmp/layerlru.c"
# shellcheck disable=SC2046
cc -O2 -fPIC -shared $(pc --cflags) -o "$tmp/layerlru.so" "$tmp/layerlru.c" 2> "$tmp/cc.log" ||
	{ cat "$tmp/cc.log" >&2; fail "the policy example does not build from the installed headers"; }

# The installed kvt-sim runs it like a built-in: with keep=0 it is LRU, hit
# for hit.
"$top/bin/kvt-sim" gen zipf --requests 20000 --objects 2000 -o "$tmp/zipf.trace" \
	> "$tmp/sim.log" 2>&1 || { cat "$tmp/sim.log" >&2; fail "kvt-sim gen failed"; }
hits() {
	"$top/bin/kvt-sim" run "$tmp/zipf.trace" --tier "fast=200:$1" --json > "$tmp/sim.json" \
		2> "$tmp/sim.log" || { cat "$tmp/sim.log" >&2; fail "kvt-sim run with $1 failed"; }
	grep -o '"hits": *[0-9]*' "$tmp/sim.json" | head -n 1 | grep -o '[0-9]*$'
}
lru=$(hits lru)
mine=$(hits "$tmp/layerlru.so:keep=0")
[ -n "$lru" ] && [ "$lru" -gt 0 ] || fail "kvt-sim gave no hits for lru: $(cat "$tmp/sim.json")"
[ "$mine" = "$lru" ] || fail "layerlru:keep=0 hit $mine times, lru $lru: it should be LRU"

# A program of an outside project: version, a pager whose fast tier runs
# the plug-in, pages written and read back, the build_info metric.
cat > "$tmp/prog.c" <<'PROG'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <kvt/pager.h>

#define FAIL(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } while (0)

int main(int argc, char **argv)
{
	enum { LAYERS = 2, TOKENS = 64 };
	static float k[TOKENS * 2 * 64], v[TOKENS * 2 * 64];
	static char doc[1 << 16], want[128];
	struct kvt_config cfg;
	struct kvt_device *dev;
	struct kvt_pager *p;
	struct kvt_batch *b;
	struct kvt_stats st;
	struct kvt_view view;
	kvt_seq_t s;
	char err[256];
	unsigned got = 0;
	int r;

	if (argc != 3)
		FAIL("usage: prog POLICY NVME_DIR");
	if (strcmp(kvt_version(), KVT_VERSION_STRING))
		FAIL("compiled against %s, runs with libkvt %s", KVT_VERSION_STRING, kvt_version());
	kvt_config_default(&cfg);
	cfg.n_layers = LAYERS;
	cfg.n_kv_heads = 2;
	cfg.head_dim = 64;
	cfg.page_tokens = 4;
	cfg.dtype_bytes = 4;
	cfg.tier[KVT_TIER_FAST].bytes = kvt_config_page_bytes(&cfg) * 8;
	cfg.tier[KVT_TIER_HOST].bytes = kvt_config_page_bytes(&cfg) * 16;
	cfg.tier[KVT_TIER_NVME].bytes = kvt_config_page_bytes(&cfg) * 64;
	if (kvt_config_set(&cfg, "tier.fast.policy", argv[1], err, sizeof(err)) ||
	    kvt_config_set(&cfg, "nvme.path", argv[2], err, sizeof(err)))
		FAIL("config: %s", err);
	if ((r = kvt_device_open("cpu", 0, &dev)))
		FAIL("kvt_device_open: %s", strerror(-r));
	if ((r = kvt_pager_open(&cfg, dev, &p)))
		FAIL("kvt_pager_open: %s", strerror(-r));
	for (unsigned i = 0; i < sizeof(k) / sizeof(*k); i++) {
		k[i] = (float)i;
		v[i] = -(float)i;
	}
	if ((r = kvt_seq_open(p, &s)))
		FAIL("kvt_seq_open: %s", strerror(-r));
	for (unsigned l = 0; l < LAYERS; l++)
		if ((r = kvt_seq_append(p, s, l, k, v, TOKENS)))
			FAIL("kvt_seq_append: %s", strerror(-r));
	/* 32 pages over a fast tier of 8: the policy picks the victims. */
	for (unsigned l = 0; l < LAYERS; l++) {
		if ((r = kvt_acquire(p, s, l, NULL, 0, &b)))
			FAIL("kvt_acquire: %s", strerror(-r));
		while ((r = kvt_batch_next(b, &view)) == 1) {
			const float *kk = view.k;
			if (kk[0] != (float)(view.page * 4 * 2 * 64))
				FAIL("layer %u page %u holds %g", l, view.page, kk[0]);
			got++;
		}
		kvt_batch_release(b);
		if (r)
			FAIL("kvt_batch_next: %s", strerror(-r));
	}
	if (got != LAYERS * TOKENS / 4)
		FAIL("read %u pages, wrote %u", got, LAYERS * TOKENS / 4);
	if ((r = kvt_pager_stats(p, &st)) || kvt_stats_prometheus(&st, doc, sizeof(doc)) < 0)
		FAIL("stats: %d", r);
	snprintf(want, sizeof(want), "\nkvt_build_info{version=\"%s\",", KVT_VERSION_STRING);
	if (!strstr(doc, want))
		FAIL("no line %s in the metrics", want + 1);
	kvt_seq_close(p, s);
	if ((r = kvt_pager_close(p)))
		FAIL("kvt_pager_close: %s", strerror(-r));
	kvt_device_close(dev);
	printf("libkvt %s: %u pages through %s\n", kvt_version(), got, argv[1]);
	return 0;
}
PROG
cp "$tmp/layerlru.so" "$tmp/ll.so"	# a config value is at most 63 characters
mkdir "$tmp/nvme"
runprog() {	# runprog BINARY [LD_LIBRARY_PATH]
	(cd "$tmp" && LD_LIBRARY_PATH=${2:-} "$1" ./ll.so:keep=1 "$tmp/nvme") > "$tmp/prog.log" 2>&1 ||
		{ cat "$tmp/prog.log" >&2; fail "$(basename "$1") failed"; }
	grep -q "^libkvt $version: 32 pages through ./ll.so:keep=1$" "$tmp/prog.log" ||
		fail "$(basename "$1") said: $(cat "$tmp/prog.log")"
}

# Dynamically: -lkvt finds libkvt.so, the program records libkvt.so.MAJOR.
# shellcheck disable=SC2046
cc -O2 $san $(pc --cflags) -o "$tmp/prog-dyn" "$tmp/prog.c" $(pc --libs) 2> "$tmp/cc.log" ||
	{ cat "$tmp/cc.log" >&2; fail "the program does not build with pkg-config --libs kvt"; }
readelf -d "$tmp/prog-dyn" | grep -q "NEEDED.*\[libkvt\.so\.$major\]" ||
	fail "the program does not record libkvt.so.$major"
runprog "$tmp/prog-dyn" "$top/lib"

# Statically: libkvt.a and what --static adds for it.
# shellcheck disable=SC2046
cc -O2 $san $(pc --cflags) -o "$tmp/prog-static" "$tmp/prog.c" \
	$(pc --static --libs | sed 's/\(^\| \)-lkvt\( \|$\)/\1-l:libkvt.a\2/') 2> "$tmp/cc.log" ||
	{ cat "$tmp/cc.log" >&2; fail "the program does not build with pkg-config --static --libs kvt"; }
readelf -d "$tmp/prog-static" | grep -q "libkvt" && fail "the static program needs libkvt.so"
runprog "$tmp/prog-static"

# ---- the backend plug-in's place: ../lib/kvt/ from a tool's folder ----
# A fake plug-in that loads and has no device, next to a copy of the
# installed tool in the same layout: the tool must find and load it.
fake=$build/fake/nodev/libkvt-cuda.so
if [ -f "$fake" ]; then
	mkdir -p "$tmp/alt/bin" "$tmp/alt/lib/kvt"
	cp "$top/bin/kvt-demo" "$tmp/alt/bin/"
	cp "$fake" "$tmp/alt/lib/kvt/"
	"$tmp/alt/bin/kvt-demo" --device cuda -t 64 -s 1 --dir "$tmp" > "$tmp/demo.log" 2>&1
	grep -q "fake: no device here" "$tmp/demo.log" ||
		fail "kvt-demo in bin/ did not load lib/kvt/libkvt-cuda.so: $(cat "$tmp/demo.log")"
fi

# ---- uninstall: ours gone, theirs kept --------------------------------
echo theirs > "$top/bin/kvt-not-ours"
echo theirs > "$top/lib/kvt/not-ours.so"
mk uninstall
left=$(cd "$dest" && find . ! -type d | sort)
want=$(printf '%s\n' ".$prefix/bin/kvt-not-ours" ".$prefix/lib/kvt/not-ours.so" | sort)
[ "$left" = "$want" ] || fail "after uninstall, left: $left"
rm "$top/bin/kvt-not-ours" "$top/lib/kvt/not-ours.so"
mk uninstall
[ -d "$top/include/kvt" ] && fail "uninstall left include/kvt"
[ -d "$top/lib/kvt" ] && fail "uninstall left lib/kvt"
[ -z "$(cd "$dest" && find . ! -type d)" ] || fail "uninstall left files"
cd "$root" || exit 1
echo "t_install: installed, used (dynamic and static) and uninstalled libkvt $version"
exit 0
