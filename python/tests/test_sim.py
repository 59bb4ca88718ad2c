# SPDX-License-Identifier: MIT
"""Traces and replays from Python against kvt-sim itself: the same curve as
`kvt-sim mrc --csv`, oracleGeneral files read as kvt-sim reads them, and
policies written in Python counted exactly as the built-in ones."""
import csv
import os
import random
import struct
import subprocess
import unittest

import kvtier
from common import PyFIFO, PyLRU, scratch, tool

POLICIES = ["lru", "fifo", "clock", "s3fifo", "sieve", "belady"]
SIZES = ["1%", "5%", "20%", "50%"]


def kvt_sim_mrc(path, out):
    """kvt-sim mrc's CSV rows for path, keyed by (policy, frames)."""
    subprocess.run([tool("kvt-sim"), "mrc", path, "--policies", ",".join(POLICIES),
                    "--sizes", ",".join(SIZES), "--threads", "1", "--no-bar", "--csv", out],
                   check=True, stdout=subprocess.DEVNULL)
    with open(out, newline="") as f:
        return list(csv.DictReader(f))


def write_oracle(path, keys):
    """A libCacheSim oracleGeneral file: {u32 time; u64 id; u32 size; i64 next}."""
    nxt, seen = [0] * len(keys), {}
    for i in range(len(keys) - 1, -1, -1):
        nxt[i] = seen.get(keys[i], -1)
        seen[keys[i]] = i + 1
    with open(path, "wb") as f:
        for i, k in enumerate(keys):
            f.write(struct.pack("<IQIq", i, k, 4096, nxt[i]))


class TestSim(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        d = scratch(cls)
        cls.zipf = os.path.join(d, "zipf.oracle")
        subprocess.run([tool("kvt-sim"), "gen", "zipf", "--requests", "6000", "--objects", "800",
                        "--alpha", "0.9", "--seed", "7", "-o", cls.zipf],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.scan = os.path.join(d, "scan.kvtt")
        subprocess.run([tool("kvt-sim"), "gen", "scan", "--layers", "3", "--pages", "6",
                        "--append-every", "3", "--steps", "30", "-o", cls.scan],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cls.dir = d

    def check_curve(self, path, name):
        rows = kvt_sim_mrc(path, os.path.join(self.dir, name + ".csv"))
        self.assertEqual(len(rows), len(POLICIES) * len(SIZES))
        with kvtier.Trace(path) as t:
            frames = t.frames_for([float(s[:-1]) for s in SIZES])
            self.assertEqual(frames, [int(r["frames"]) for r in rows[:len(SIZES)]])
            curve = t.mrc(POLICIES, frames)
            self.assertEqual(len(curve.points), len(rows))
            for pt, row in zip(curve.points, rows):
                self.assertEqual((pt.policy, pt.frames, pt.refs, pt.hits, pt.misses),
                                 (row["policy"], int(row["frames"]), int(row["refs"]),
                                  int(row["hits"]), int(row["misses"])), row)
                self.assertEqual("%.6f" % pt.miss_ratio, row["miss_ratio"], row)
            for p in POLICIES:
                self.assertEqual(curve[p], [pt.miss_ratio for pt in curve.points
                                            if pt.policy == p])
            # Not one number shared by every policy: the curves differ.
            self.assertGreater(len({tuple(curve[p]) for p in POLICIES}), 2)
            # Threads change nothing.
            self.assertEqual(t.mrc(POLICIES, frames, threads=2).points, curve.points)

    def test_mrc_equals_kvt_sim_oracle(self):
        self.check_curve(self.zipf, "zipf")

    def test_mrc_equals_kvt_sim_kvtier(self):
        self.check_curve(self.scan, "scan")

    def test_oracle_written_here(self):
        """An oracleGeneral file made by this test reads as its keys."""
        rng = random.Random(5)
        keys = [rng.randrange(1, 300) * 7919 for _ in range(3000)]
        path = os.path.join(self.dir, "mine.oracle")
        write_oracle(path, keys)
        with kvtier.Trace(path) as t, kvtier.Trace.from_keys(keys) as k:
            self.assertEqual(t.format, "oracleGeneral")
            self.assertEqual(k.format, "keys")
            self.assertEqual((t.refs, t.pages), (len(keys), len(set(keys))))
            self.assertEqual((k.refs, k.pages), (len(keys), len(set(keys))))
            sizes = [10, 40, 150]
            a, b = t.mrc(["lru", "belady"], sizes), k.mrc(["lru", "belady"], sizes)
            self.assertEqual(a.points, b.points)
            self.assertTrue(all(x < y for x, y in zip(a["belady"], a["lru"])))

    def test_python_fifo_equals_builtin(self):
        with kvtier.Trace(self.zipf) as t:
            frames = t.frames_for([1, 10, 40])
            c = t.mrc(["fifo", PyFIFO, "lru", PyLRU], frames)
            self.assertEqual(c["pyfifo"], c["fifo"])
            self.assertEqual(c["pylru"], c["lru"])
            self.assertNotEqual(c["fifo"], c["lru"])
        # The general replay: steps and layers, two tiers, each policy's
        # counts (promotions, demotions, drops) as the built-in's.
        with kvtier.Trace(self.scan) as t:
            for backed in (1, 0):
                mine = t.replay([(PyFIFO, 12), (PyLRU, 40)], backed=backed)
                ref = t.replay([("fifo", 12), ("lru", 40)], backed=backed)
                self.assertEqual(mine, ref)
                self.assertGreater(ref[0]["misses"], 0)
                self.assertGreater(ref[1]["hits"], 0)

    def test_arrays(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not installed")
        with kvtier.Trace(self.zipf) as t:
            frames = t.frames_for([1, 10, 40])
            lists = t.mrc(["lru", PyFIFO], frames)
            arrays = t.mrc(["lru", PyFIFO], frames, as_array=True)
            self.assertIsInstance(arrays["lru"], np.ndarray)
            self.assertEqual(arrays.frames.tolist(), frames)
            for p in ("lru", "pyfifo"):
                self.assertEqual(arrays[p].tolist(), lists[p])
            keys = np.array([3, 9, 3, 27, 9, 3], dtype=np.uint64)
            with kvtier.Trace.from_keys(keys) as a, \
                    kvtier.Trace.from_keys(keys.astype(np.int32)) as b:
                self.assertEqual((a.refs, a.pages), (6, 3))
                self.assertEqual(a.mrc(["lru"], [1, 2]).points, b.mrc(["lru"], [1, 2]).points)
                # 3 9 3 27 9 3 in two LRU frames: the second 3 hits; then 27
                # pushes 9 out and 9 pushes 3 out; in three frames the last
                # three hit too
                self.assertEqual([p.hits for p in a.mrc(["lru"], [2, 3]).points], [1, 3])

    def test_bad_input(self):
        with self.assertRaises(kvtier.KvtError) as e:
            kvtier.Trace(os.path.join(self.dir, "absent.kvtt"))
        self.assertIn("absent.kvtt", str(e.exception))
        junk = os.path.join(self.dir, "junk")
        with open(junk, "wb") as f:
            f.write(b"not a trace, 29 bytes long..")
        with self.assertRaises(kvtier.KvtError) as e:
            kvtier.Trace(junk)
        self.assertIn("junk", str(e.exception))
        with kvtier.Trace(self.zipf) as t:
            with self.assertRaises(kvtier.KvtError) as e:
                t.mrc(["lru", "nosuch"], [10])
            self.assertIn("nosuch", str(e.exception))
            with self.assertRaises(kvtier.KvtError) as e:
                t.mrc(["lru"], [0])
            self.assertIn("0 frames", str(e.exception))

    def test_python_policy_errors(self):
        class Refuses(PyFIFO):
            name = "refuses"
            params = "keep=2"

            def __init__(self, capacity, params=""):
                raise ValueError("refuses: bad params %r" % params)

        class Broken(PyFIFO):
            name = "broken"

            def victims(self, want, pinned):
                raise KeyError("broken victims")

        with kvtier.Trace(self.zipf) as t:
            with self.assertRaisesRegex(ValueError, "refuses: bad params 'keep=2'"):
                t.replay([(Refuses, 10)])
            with self.assertRaisesRegex(KeyError, "broken victims"):
                t.replay([(Broken, 10)])
            # The trace is still good for the next replay.
            self.assertEqual(t.replay([(PyFIFO, 10)]), t.replay([("fifo", 10)]))


if __name__ == "__main__":
    unittest.main()
