#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The layers' dependencies run one way (docs/architecture.md, Layers):
#   - no file of the core (pager/, kernels/, runtime/) includes a header
#     of the operator layer (ops/);
#   - an ops/ file includes, of the project, only the public headers
#     (include/kvt/), its own folder, the core's narrow hook header
#     (pager/hooks.h) and its text helper (pager/out.h);
#   - the pager core knows nothing of sockets: no socket header, no
#     socket, bind, listen, accept or connect call;
#   - kernels/ (the devices) knows nothing of pages: it includes nothing
#     of pager/, runtime/ or ops/.
# Each breach is one line naming the file and the include or call.
# Exit 0 pass, 1 fail.
cd "$(dirname "$0")/.." || exit 1

bad=0
complain() {
	echo "t_layers: $*" >&2
	bad=1
}

# The files each rule is about; a rule with nothing to look at is a
# broken rule, not a pass.
core=$(find pager kernels runtime -name '*.[ch]' | sort)
ops=$(find ops -name '*.[ch]' | sort)
pager=$(find pager -name '*.[ch]' | sort)
kernels=$(find kernels -name '*.[ch]' -o -name '*.cu' | sort)
[ "$(echo "$core" | wc -w)" -ge 20 ] || complain "found $(echo "$core" | wc -w) core files"
[ "$(echo "$ops" | wc -w)" -ge 5 ] || complain "found $(echo "$ops" | wc -w) ops files"
[ "$(echo "$kernels" | wc -w)" -ge 10 ] || complain "found $(echo "$kernels" | wc -w) kernels files"
[ -f pager/hooks.h ] || complain "pager/hooks.h is missing"

# #include "X": the quoted name, one per line: FILE:LINE:NAME.
quoted() {
	grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$@" /dev/null |
		sed -E 's/^([^:]*:[0-9]+):[^"]*"([^"]*)".*/\1:\2/'
}

for f in $core; do
	quoted "$f" | while IFS=: read -r file line name; do
		case $name in
		ops/*|*/ops/*) echo "$file:$line includes \"$name\": the core may not use ops/" ;;
		esac
	done
done >"${TMPDIR:-/tmp}/t_layers.$$"

for f in $ops; do
	quoted "$f" | while IFS=: read -r file line name; do
		case $name in
		pager/hooks.h|pager/out.h|ops/*.h|kvt/*.h) ;;
		*) echo "$file:$line includes \"$name\": ops/ may use only include/kvt/," \
			"ops/, pager/hooks.h and pager/out.h" ;;
		esac
	done
	grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<(kvt|pager|kernels|runtime)/' \
		"$f" /dev/null | grep -v '<kvt/' |
		sed 's/$/: ops\/ may use only include\/kvt\/, ops\/, pager\/hooks.h and pager\/out.h/'
done >>"${TMPDIR:-/tmp}/t_layers.$$"

for f in $pager; do
	grep -nE '^[[:space:]]*#[[:space:]]*include[[:space:]]*<(sys/socket|sys/un|netdb)\.h>|<netinet/' \
		"$f" /dev/null | sed 's/$/: the pager core knows nothing of sockets/'
	# Calls, not words in comments: NAME( after a non-identifier character.
	grep -nE '(^|[^A-Za-z0-9_.>])(socket|bind|listen|accept4?|connect)[[:space:]]*\(' "$f" /dev/null |
		grep -vE '^[^:]*:[0-9]+:[[:space:]]*(/?\*|//)' |
		sed 's/$/: the pager core knows nothing of sockets/'
done >>"${TMPDIR:-/tmp}/t_layers.$$"

for f in $kernels; do
	quoted "$f" | while IFS=: read -r file line name; do
		case $name in
		pager/*|runtime/*|ops/*|*/pager/*|*/runtime/*|*/ops/*)
			echo "$file:$line includes \"$name\": kernels/ may not use the layers above it" ;;
		esac
	done
done >>"${TMPDIR:-/tmp}/t_layers.$$"

if [ -s "${TMPDIR:-/tmp}/t_layers.$$" ]; then
	sed 's/^/t_layers: /' "${TMPDIR:-/tmp}/t_layers.$$" >&2
	bad=1
fi
rm -f "${TMPDIR:-/tmp}/t_layers.$$"
[ $bad -eq 0 ] && echo "t_layers: $(echo "$core" | wc -w) core files, $(echo "$ops" | wc -w) ops files: the layers hold"
exit $bad
