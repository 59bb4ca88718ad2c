# SPDX-License-Identifier: MIT
"""The live pager from Python: what is appended comes back byte for byte,
through the host and NVMe tiers; the statistics count it; a trace the
pager records replays with a Python policy as with the built-in one."""
import os
import random
import unittest

import kvtier
from common import PyFIFO, PyLIFO, scratch

LAYERS, HEADS, DIM, PT = 3, 2, 64, 4     # f32: 4 KiB pages, 512 bytes a token
STEPS = 60                               # decode steps of the recorded trace


def config(d, fast, host, nvme):
    page = PT * HEADS * DIM * 2 * 4
    return {"geometry.layers": LAYERS, "geometry.kv_heads": HEADS, "geometry.head_dim": DIM,
            "geometry.page_tokens": PT, "geometry.dtype": "f32",
            "tier.fast.bytes": fast * page, "tier.host.bytes": host * page,
            "tier.nvme.bytes": nvme * page, "nvme.path": d, "host.prefault_threads": 1,
            "host.hugepages": "off", "host.mlock": "off", "access.host_in_place": "off"}


class TestPager(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = scratch(cls)

    def fill(self, p, s, ntok, rng):
        """Append ntok tokens to every layer of s, in uneven pieces."""
        tb = p.token_bytes()
        data = {l: [b"", b""] for l in range(LAYERS)}
        done = 0
        while done < ntok:
            n = min(rng.randrange(1, 7), ntok - done)
            for l in range(LAYERS):
                k, v = rng.randbytes(n * tb), rng.randbytes(n * tb)
                s.append(l, k, v)
                data[l][0] += k
                data[l][1] += v
            done += n
        return data

    def test_roundtrip_through_tiers(self):
        rng = random.Random(11)
        # 14 pages a layer, 42 in all: 6 fit in fast, 12 in host, the rest
        # must live on NVMe and come back up.
        with kvtier.Pager(config(self.dir, 6, 12, 64)) as p:
            self.assertEqual(p.page_bytes, 4096)
            s = p.open_seq()
            ntok = 14 * PT - 1                  # the last page is short
            data = self.fill(p, s, ntok, rng)
            self.assertEqual(s.tokens(1), ntok)
            self.assertEqual(s.pages(1), 14)
            tb, seen, read = p.token_bytes(), set(), 0
            for rnd in range(2):
                for l in range(LAYERS):
                    p.step()
                    pages = s.acquire(l)
                    read += len(pages)
                    self.assertEqual(sorted(x.page for x in pages), list(range(14)))
                    for x in pages:
                        a = x.page * PT * tb
                        self.assertEqual(x.ntok, PT if x.page < 13 else PT - 1)
                        self.assertEqual(x.k, data[l][0][a:a + x.ntok * tb], (l, x.page))
                        self.assertEqual(x.v, data[l][1][a:a + x.ntok * tb], (l, x.page))
                        seen.add(x.tier)
            some = s.acquire(2, [9, 3])
            read += len(some)
            self.assertEqual(sorted(x.page for x in some), [3, 9])
            st = p.stats()
            self.assertEqual(st["acquires"], read)
            self.assertEqual(st["seqs"], 1)
            self.assertEqual(st["pages"], LAYERS * 14)
            nvme = st["tiers"]["nvme"]
            self.assertGreater(nvme["bytes_out"], 0)     # pages came up from NVMe
            self.assertGreater(st["tiers"]["host"]["promotions"], 0)
            s.close()
            self.assertEqual(p.stats()["seqs"], 0)

    def test_fork_park_resume(self):
        rng = random.Random(12)
        with kvtier.Pager(config(self.dir, 8, 64, 0)) as p:
            s = p.open_seq()
            data = self.fill(p, s, 5 * PT, rng)
            c = s.fork(3 * PT + 2)
            self.assertEqual(c.tokens(0), 3 * PT + 2)
            s.park()
            s.resume()
            tb = p.token_bytes()
            for seq, n in ((s, 5 * PT), (c, 3 * PT + 2)):
                got = sorted(seq.acquire(0), key=lambda x: x.page)
                self.assertEqual(b"".join(x.k for x in got), data[0][0][:n * tb])
                self.assertEqual(b"".join(x.v for x in got), data[0][1][:n * tb])

    def test_arrays(self):
        try:
            import numpy as np
        except ImportError:
            self.skipTest("numpy is not installed")
        with kvtier.Pager(config(self.dir, 8, 16, 0)) as p:
            s = p.open_seq()
            k = np.arange(6 * HEADS * DIM, dtype=np.float32).reshape(6, HEADS, DIM)
            for l in range(LAYERS):
                s.append(l, k, -k)
            got = sorted(s.acquire(1, as_array=True), key=lambda x: x.page)
            self.assertEqual([x.k.shape for x in got], [(4, HEADS, DIM), (2, HEADS, DIM)])
            self.assertTrue(np.array_equal(np.concatenate([x.k for x in got]), k))
            self.assertTrue(np.array_equal(np.concatenate([x.v for x in got]), -k))

    def test_bad_input(self):
        with self.assertRaisesRegex(ValueError, "geometry.layerz"):
            kvtier.Config({"geometry.layerz": 2})
        with self.assertRaisesRegex(ValueError, "tier.fast.bytes"):
            kvtier.Config({"tier.fast.bytes": "lots"})
        with kvtier.Pager(config(self.dir, 8, 16, 0)) as p:
            s = p.open_seq()
            with self.assertRaisesRegex(ValueError, "want 1 tokens x 512 bytes"):
                s.append(0, bytes(512), bytes(500), 1)
            with self.assertRaises(kvtier.KvtError):
                s.append(LAYERS, bytes(512), bytes(512))
            with self.assertRaises(kvtier.KvtError):
                s.acquire(0, [7])                  # no page 7
            s.close()
            with self.assertRaises(kvtier.KvtError) as e:
                s.tokens(0)                        # a closed sequence's handle
            self.assertEqual(e.exception.errno, 116)   # ESTALE

    def test_recorded_trace_replays_python_policy(self):
        """A trace of the live pager (NEW records, tail pins, three tiers)
        replays with a Python FIFO exactly as with the built-in fifo."""
        rng = random.Random(13)
        path = os.path.join(self.dir, "live.kvtt")
        with kvtier.Pager(config(self.dir, 16, 24, 64)) as p:
            p.trace_start(path)
            seqs = [p.open_seq() for _ in range(3)]
            for s in seqs:
                self.fill(p, s, 6 * PT + 1, rng)
            for _ in range(STEPS):
                # Two hot pages every step (a recency policy keeps them),
                # then three cold ones of a sequence and layer at random.
                p.step()
                seqs[0].acquire(0, [0, 1])
                rng.choice(seqs).acquire(rng.randrange(LAYERS), rng.sample(range(2, 7), 3))
            p.trace_stop()
        with kvtier.Trace(path) as t:
            self.assertEqual(t.format, "kvtier")
            self.assertEqual(t.news, 3 * LAYERS * 7)
            self.assertEqual(t.refs, STEPS * 5)
            for tiers in ([12, 24], [16, 24, 64], [24, 16, 64]):
                for mine, builtin in ((PyFIFO, "fifo"), (PyLIFO, "lifo")):
                    got = t.replay([(mine, n) for n in tiers], backed=0)
                    ref = t.replay([(builtin, n) for n in tiers], backed=0)
                    self.assertEqual(got, ref, (builtin, tiers))
                    self.assertGreater(ref[0]["misses"], 0)
                    self.assertGreater(ref[0]["demotions"], 0)
                # The two rank otherwise and count otherwise: the
                # equalities above say something.
                self.assertNotEqual(t.replay([(PyLIFO, n) for n in tiers], backed=0),
                                    t.replay([("fifo", n) for n in tiers], backed=0))

if __name__ == "__main__":
    unittest.main()
