#!/bin/sh
# SPDX-License-Identifier: MIT
# The Python package (python/kvtier) against the built library and tools:
# python/tests/test_*.py under unittest. Skipped (77) only where there is
# no python3; BUILD (run.sh sets it) names the build folder.
command -v python3 >/dev/null 2>&1 || { echo "no python3"; exit 77; }
top=$(cd "$(dirname "$0")/.." && pwd) || exit 1
build=${BUILD:-build}
case $build in /*) ;; *) build=$top/$build ;; esac
[ -f "$build/libkvt.so" ] || { echo "$build/libkvt.so: not built (make lib)"; exit 1; }
KVT_LIB=$build/libkvt.so KVT_BUILD=$build PYTHONPATH=$top/python${PYTHONPATH:+:$PYTHONPATH} \
	exec python3 -m unittest discover -s "$top/python/tests" -t "$top/python/tests" -v
