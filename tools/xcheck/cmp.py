#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compare two --dump-logits files (rows of n_vocab little-endian float32).

    cmp.py OURS REF N_VOCAB [--max-rel X] [--argmax]

Prints the worst relative difference over the rows (max |a - b| over a row
divided by max |b|) and how many rows have the same argmax. Each engine
feeds back its own greedy token, so after the first row whose argmax differs
the two go on from different contexts: rows after it are not compared.
Exits 1 when the row counts differ, a value is not finite, a reference row
is all zero, the worst difference is above X, or (--argmax) an argmax
differs."""
import array
import math
import sys


def rows(path, n):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    return [a[i:i + n] for i in range(0, len(a), n)]


def main():
    args = sys.argv[1:]
    max_rel = None
    need_argmax = "--argmax" in args
    if need_argmax:
        args.remove("--argmax")
    if "--max-rel" in args:
        i = args.index("--max-rel")
        max_rel = float(args[i + 1])
        del args[i:i + 2]
    if len(args) != 3:
        sys.exit(__doc__)
    n = int(args[2])
    a, b = rows(args[0], n), rows(args[1], n)
    if len(a) != len(b) or not a:
        print(f"rows: {len(a)} against {len(b)}")
        return 1
    worst, agree, seen = 0.0, 0, 0
    for i, (ra, rb) in enumerate(zip(a, b)):
        if not all(map(math.isfinite, ra)) or not all(map(math.isfinite, rb)):
            print(f"row {i}: a value that is not finite")
            return 1
        mb = max(abs(y) for y in rb)
        if mb == 0:
            print(f"row {i}: the reference row is all zero")
            return 1
        worst = max(worst, max(abs(x - y) for x, y in zip(ra, rb)) / mb)
        seen += 1
        if max(range(n), key=ra.__getitem__) != max(range(n), key=rb.__getitem__):
            break
        agree += 1
    ok = (max_rel is None or worst <= max_rel) and (not need_argmax or agree == len(a))
    print(f"worst rel {worst:.1e}, argmax {agree}/{len(a)}"
          + (f" (rows after {seen - 1} not compared)" if seen < len(a) else "")
          + ("" if ok else "  FAIL (" + ", ".join(
              ([f"limit {max_rel:.0e}"] if max_rel is not None else [])
              + (["every argmax"] if need_argmax else [])) + ")"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
