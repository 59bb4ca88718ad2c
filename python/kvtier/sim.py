# SPDX-License-Identifier: MIT
"""Traces and replays: kvt-sim's engine (include/kvt/sim.h) from Python.

    t = Trace("run.kvtt")                 # a kvtier trace or an oracleGeneral file
    curve = t.mrc(["lru", "s3fifo"], [100, 200, 400])
    curve["lru"]                          # miss ratios, one per size

A policy written in Python (a Policy subclass) replays through the same
engine as the built-in ones: see Policy.
"""
import ctypes
from collections import namedtuple
from ctypes import byref, c_char_p, c_uint64, c_void_p

from . import _lib
from ._lib import KvtError, check

ERRLEN = 512


def _want_array(as_array):
    if not as_array:
        return None
    try:
        import numpy
    except ImportError:
        raise ImportError("as_array=True needs numpy; without it the results are lists") from None
    return numpy


class Point(namedtuple("Point", "policy frames refs hits misses miss_ratio")):
    """One replay of a curve: a policy at a size (frames), as a row of
    `kvt-sim mrc --csv`."""
    __slots__ = ()


class Curve(dict):
    """Miss-ratio curves: curve[policy] is the list (or numpy array) of miss
    ratios at curve.frames; curve.points holds every replay's counts."""

    def __init__(self, frames, points, ratios):
        super().__init__(ratios)
        self.frames = frames
        self.points = points


class Trace:
    """A trace loaded for replay. Trace(path) reads a kvtier trace
    (docs/trace-format.md) or a libCacheSim oracleGeneral file;
    Trace.from_keys(keys) makes one from bare keys (record i: an access to
    keys[i] in step i). Close it (or use `with`) to free it at once."""

    def __init__(self, path=None, _handle=None):
        lib = _lib.load()
        self._h = None
        if _handle is not None:
            self._h = _handle
            self.path = None
        else:
            if path is None:
                raise TypeError("Trace(path): no path given (Trace.from_keys makes one from keys)")
            h = c_void_p()
            err = ctypes.create_string_buffer(ERRLEN)
            check(lib.kvt_sim_open(str(path).encode(), byref(h), err, ERRLEN), err)
            self._h = h
            self.path = str(path)
        info = _lib.SimInfo()
        lib.kvt_sim_describe(self._h, byref(info))
        self.records = info.records     # records kept for the replay
        self.refs = info.refs           # ACCESS records
        self.news = info.news           # NEW records
        self.steps = info.steps
        self.pages = info.pages         # distinct pages
        self.page_bytes = info.page_bytes
        self.gaps = info.gaps
        self.format = info.format.decode()
        self.source = None if info.source == 0xffffffff else info.source

    @classmethod
    def from_keys(cls, keys):
        """A trace from an iterable of integer keys (a list, a numpy array)."""
        lib = _lib.load()
        try:                            # array.array("Q"), a numpy uint64 array
            mv = memoryview(keys)
            if mv.ndim != 1 or mv.itemsize != 8 or mv.format not in ("Q", "L", "q", "l"):
                raise TypeError
            arr = (c_uint64 * len(mv)).from_buffer_copy(mv)
        except TypeError:
            keys = [int(k) for k in keys]
            arr = (c_uint64 * len(keys))(*keys)
        h = c_void_p()
        check(lib.kvt_sim_open_keys(arr, len(arr), byref(h)), what="from_keys")
        return cls(_handle=h)

    def close(self):
        if self._h:
            _lib.load().kvt_sim_close(self._h)
            self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __repr__(self):
        return "<kvtier.Trace %s: %s, %d references, %d pages>" % (
            self.path or "(keys)", self.format, self.refs, self.pages)

    def _handle(self):
        if not self._h:
            raise ValueError("the trace is closed")
        return self._h

    def frames_for(self, percents):
        """Sizes in frames for shares of the trace's pages in per cent
        (10 = 10%), counted as kvt-sim mrc --sizes 10% counts them."""
        out = []
        for pct in percents:
            n = pct / 100.0 * self.pages
            if 0 < n < 1:
                n = 1
            out.append(int(n + 1e-9))
        return out

    def mrc(self, policies, frames, threads=1, as_array=False):
        """Miss-ratio curves: a single-tier replay (over a backing store) of
        each policy at each size in frames (pages). policies holds specs
        ("lru", "s3fifo:small=20", a plug-in path) or Policy subclasses.
        Built-in policies replay on up to `threads` threads; Python ones on
        the calling thread. Returns a Curve: curve[policy] the miss ratios
        in the order of frames (numpy arrays with as_array=True)."""
        np_ = _want_array(as_array)
        frames = [int(f) for f in frames]
        if not policies or not frames:
            raise ValueError("mrc: want at least one policy and one size")
        names = [_policy_name(p) for p in policies]
        if len(set(names)) != len(names):
            raise ValueError("mrc: a policy is named twice: %s" % ", ".join(names))
        builtin = [p for p in policies if isinstance(p, str)]
        res = {}
        if builtin:
            lib = _lib.load()
            nb, ns = len(builtin), len(frames)
            specs = (c_char_p * nb)(*[p.encode() for p in builtin])
            fr = (c_uint64 * ns)(*frames)
            hits = (c_uint64 * (nb * ns))()
            misses = (c_uint64 * (nb * ns))()
            refs = c_uint64()
            err = ctypes.create_string_buffer(ERRLEN)
            check(lib.kvt_sim_curve(self._handle(), specs, nb, fr, ns, max(int(threads), 1),
                                    hits, misses, byref(refs), err, ERRLEN), err)
            for i, p in enumerate(builtin):
                res[p] = [(hits[i * ns + s], misses[i * ns + s], refs.value)
                          for s in range(ns)]
        for p in policies:
            if not isinstance(p, str):
                res[_policy_name(p)] = [self._replay1(p, f) for f in frames]
        points, ratios = [], {}
        for p in names:
            row = []
            for f, (h, m, r) in zip(frames, res[p]):
                ratio = m / r if r else 0.0
                points.append(Point(p, f, r, h, m, ratio))
                row.append(ratio)
            ratios[p] = np_.array(row) if np_ else row
        return Curve(np_.array(frames) if np_ else frames, points, ratios)

    def _replay1(self, policy, frames):
        c = self.replay([(policy, frames)], backed=1)[0]
        return c["hits"], c["misses"], c["refs"]

    def replay(self, tiers, backed=-1):
        """Replay through tiers, top first: a list of (policy, frames), the
        policy a spec or a Policy subclass. backed: 1, a backing store under
        the last tier holds every page; 0, as the pager, the last tier keeps
        the only copies; -1, 1 for traces without NEW records. Returns one
        dict of counts per tier: refs, hits, misses, promotions,
        demotions, drops, used, and miss_ratio (misses / refs)."""
        lib = _lib.load()
        n = len(tiers)
        if not 1 <= n <= 8:
            raise ValueError("replay: %d tiers: want 1..8" % n)
        lv = (_lib.SimLevel * n)()
        keep = []
        for i, (pol, frames) in enumerate(tiers):
            if isinstance(pol, str):
                lv[i].policy = pol.encode()
            else:
                tab = _PolicyTable(pol, getattr(pol, "params", ""))
                keep.append(tab)
                lv[i].policy = tab.spec
                lv[i].ops = ctypes.addressof(tab.ops)
            lv[i].frames = int(frames)
        out = (_lib.SimCounts * n)()
        err = ctypes.create_string_buffer(ERRLEN)
        rc = lib.kvt_sim_replay(self._handle(), lv, n, int(backed), out, err, ERRLEN)
        for tab in keep:
            tab.reraise()
        check(rc, err)
        res = []
        for c in out:
            d = {f: getattr(c, f) for f, _ in _lib.SimCounts._fields_}
            d["miss_ratio"] = c.misses / c.refs if c.refs else 0.0
            res.append(d)
        return res


def _policy_name(p):
    if isinstance(p, str):
        return p
    if isinstance(p, type) and issubclass(p, Policy):
        return p.name
    raise TypeError("a policy is a spec string or a Policy subclass, not %r" % (p,))


class Policy:
    """A policy written in Python, replayed by the C engine through ctypes
    callbacks: subclass it, set `name`, and override the methods below
    (the contract of pager/policy.h, docs/policies.md). One instance is
    made per tier and replay: __init__(capacity, params) is the policy's
    init, params the class's `params` text; raising there refuses them.

    The keys are opaque integers; `ref` carries key, time (the policy
    clock), step, next (offline replays only, else 2**64 - 1), seq, layer,
    index (2**32 - 1 when unknown) and score. The C engine calls from the
    thread that called replay() or mrc(), holding the GIL for each call:
    a Python policy is exact but slow (about a million calls a second)."""

    name = "python"
    params = ""             # what __init__ gets as params ("key=value,...")
    offline = False         # True: wants ref.next (Belady-like policies)

    def __init__(self, capacity, params=""):
        self.capacity = capacity

    def insert(self, ref):
        """A page entered the tier."""

    def access(self, ref):
        """A resident page was used (at most once per page per step)."""

    def score(self, ref):
        """The attention mass ref.score the page carried in step ref.step."""

    def remove(self, key):
        """A page left the tier."""

    def victims(self, want, pinned):
        """Up to `want` keys to evict, best first, skipping keys for which
        pinned(key) is true. Only looks: remove() follows for each page the
        engine really evicts."""
        raise NotImplementedError


class _PolicyTable:
    """The C table (struct kvt_policy_ops) over a Policy subclass. It keeps
    the callbacks alive as long as the table, catches what a method raises
    (the C side cannot unwind) and raises the first such error after the
    replay."""

    def __init__(self, cls, params=""):
        if not (isinstance(cls, type) and issubclass(cls, Policy)):
            raise TypeError("want a Policy subclass, not %r" % (cls,))
        name = cls.name
        if not name or ":" in name or "/" in name:
            raise ValueError("policy name %r: want a non-empty name without ':' or '/'" % name)
        self.cls = cls
        self.spec = (name + (":" + params if params else "")).encode()
        self.states = {}
        self.next_id = 1
        self.error = None
        self._name = name.encode()
        has_score = cls.score is not Policy.score
        self.ops = _lib.PolicyOps(
            abi=_lib.POLICY_ABI, size=ctypes.sizeof(_lib.PolicyOps),
            name=self._name, meta_size=0, flags=1 if cls.offline else 0,
            init=_lib.POLICY_INIT(self._init), destroy=_lib.POLICY_DESTROY(self._destroy),
            on_insert=_lib.POLICY_EVENT(self._insert), on_access=_lib.POLICY_EVENT(self._access),
            on_score=_lib.POLICY_EVENT(self._score) if has_score else _lib.POLICY_EVENT(),
            on_remove=_lib.POLICY_REMOVE(self._remove),
            victims=_lib.POLICY_VICTIMS(self._victims))

    def _fail(self, e):
        if self.error is None:
            self.error = e

    def reraise(self):
        if self.error is not None:
            e, self.error = self.error, None
            raise e

    def _init(self, state, params, capacity, err, errlen):
        try:
            obj = self.cls(capacity, params.decode() if params else "")
        except Exception as e:  # noqa: BLE001 (raised again after the replay)
            self._fail(e)
            if err and errlen:  # the one line the engine reports
                msg = str(e).encode()[:errlen - 1] + b"\0"
                ctypes.memmove(err, msg, len(msg))
            return -22          # -EINVAL: the engine reports refused parameters
        sid = self.next_id
        self.next_id += 1
        self.states[sid] = obj
        state[0] = sid
        return 0

    def _destroy(self, state):
        self.states.pop(state or 0, None)

    def _insert(self, state, ref, meta):
        try:
            self.states[state].insert(_ref(ref))
        except Exception as e:  # noqa: BLE001
            self._fail(e)

    def _access(self, state, ref, meta):
        try:
            self.states[state].access(_ref(ref))
        except Exception as e:  # noqa: BLE001
            self._fail(e)

    def _score(self, state, ref, meta):
        try:
            self.states[state].score(_ref(ref))
        except Exception as e:  # noqa: BLE001
            self._fail(e)

    def _remove(self, state, key, meta):
        try:
            self.states[state].remove(key)
        except Exception as e:  # noqa: BLE001
            self._fail(e)

    def _victims(self, state, out, want, pinned, arg):
        try:
            n = 0
            # The engine passes no pinned() when nothing is pinned.
            test = (lambda key: bool(pinned(arg, key))) if pinned else (lambda key: False)
            for k in self.states[state].victims(want, test):
                if n == want:
                    break
                out[n] = k
                n += 1
            return n
        except Exception as e:  # noqa: BLE001
            self._fail(e)
            return 0


RefT = namedtuple("Ref", "key time step next seq layer index score")


def _ref(p):
    r = p.contents
    return RefT(r.key, r.time, r.step, r.next, r.seq, r.layer, r.index, r.score)


__all__ = ["Trace", "Curve", "Point", "Policy", "KvtError"]
