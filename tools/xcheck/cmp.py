#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Compare two --dump-logits files (rows of n_vocab little-endian float32).

    cmp.py OURS REF N_VOCAB [--max-rel X] [--argmax]

Prints the worst relative difference over the rows (max |a - b| over a row
divided by max |b|) and how many rows have the same argmax. Exits 1 when the
row counts differ, the worst difference is above X, or (--argmax) an argmax
differs."""
import array
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
    worst, agree = 0.0, 0
    for ra, rb in zip(a, b):
        d = max(abs(x - y) for x, y in zip(ra, rb))
        worst = max(worst, d / max(abs(y) for y in rb))
        agree += max(range(n), key=ra.__getitem__) == max(range(n), key=rb.__getitem__)
    ok = (max_rel is None or worst <= max_rel) and (not need_argmax or agree == len(a))
    print(f"worst rel {worst:.1e}, argmax {agree}/{len(a)}"
          + ("" if ok else f"  FAIL (limit {max_rel:.0e}{', every argmax' if need_argmax else ''})"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
