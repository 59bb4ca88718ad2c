# SPDX-License-Identifier: MIT
"""The live pager (include/kvt/pager.h) from Python: open one with a
configuration, open sequences, append K and V, acquire pages back, read
the statistics.

    with Pager({"geometry.layers": 2, "tier.fast.bytes": "64K"}) as p:
        s = p.open_seq()
        s.append(0, k_bytes, v_bytes, ntok)
        for page in s.acquire(0):
            page.k, page.v                # bytes (numpy arrays: as_array=True)
        p.stats()["tier"]                 # the kvt_stats_json object as a dict

The pager runs its own migration thread; every call here is a plain C
call that releases the GIL while it runs.
"""
import ctypes
import json
from ctypes import byref, c_uint32, c_uint64, c_void_p

from . import _lib
from ._lib import KvtError, check

ERRLEN = 512
# struct kvt_config and struct kvt_stats are filled and read by the
# library only (kvt_config_set, kvt_stats_json): the package never
# mirrors their layout, it hands the library room enough for them.
# _config_buffer() checks the room against what kvt_config_default writes.
CONFIG_ROOM = 64 << 10
STATS_ROOM = 64 << 10
JSON_ROOM = 256 << 10
TIERS = {"fast": 0, "host": 1, "nvme": 2}


def _text(v):
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def _config_buffer(lib):
    """A buffer holding the defaults, known to be larger than the
    library's struct kvt_config: kvt_config_default zeroes the whole
    struct, so the sentinel bytes past it must survive."""
    buf = ctypes.create_string_buffer(b"\xa5" * CONFIG_ROOM, CONFIG_ROOM)
    lib.kvt_config_default(buf)
    if buf.raw[-4096:] != b"\xa5" * 4096:
        raise OSError("libkvt's struct kvt_config outgrew the package's room for it "
                      "(CONFIG_ROOM in kvtier/pager.py)")
    return buf


class Config:
    """A pager configuration: the documented defaults (docs/config.md),
    then an INI file and keys. Keys are "section.key" as in the INI file
    ("tier.fast.bytes", "geometry.layers"); values are strings or numbers
    (sizes take K/M/G/T). A bad key or value raises ValueError with the
    library's message naming it."""

    def __init__(self, keys=None, ini=None):
        self._lib = _lib.load()
        self._buf = _config_buffer(self._lib)
        if ini is not None:
            self.load(ini)
        for k, v in (keys or {}).items():
            self[k] = v

    def load(self, path):
        err = ctypes.create_string_buffer(ERRLEN)
        rc = self._lib.kvt_config_load(self._buf, str(path).encode(), err, ERRLEN)
        if rc < 0:
            raise ValueError(err.value.decode(errors="replace") or "%s: error %d" % (path, rc))

    def __setitem__(self, key, value):
        err = ctypes.create_string_buffer(ERRLEN)
        rc = self._lib.kvt_config_set(self._buf, key.encode(), _text(value).encode(),
                                      err, ERRLEN)
        if rc < 0:
            raise ValueError(err.value.decode(errors="replace") or "%s: error %d" % (key, rc))

    def validate(self):
        err = ctypes.create_string_buffer(ERRLEN)
        if self._lib.kvt_config_validate(self._buf, err, ERRLEN) < 0:
            raise ValueError(err.value.decode(errors="replace"))

    def page_bytes(self):
        return self._lib.kvt_config_page_bytes(self._buf)

    def text(self):
        """The effective configuration as INI text."""
        out = ctypes.create_string_buffer(JSON_ROOM)
        check(self._lib.kvt_config_print(self._buf, out, JSON_ROOM), what="config")
        return out.value.decode()

    def values(self):
        """{"section.key": "value"} of the effective configuration."""
        res, sec = {}, ""
        for line in self.text().splitlines():
            line = line.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                sec = line[1:-1].strip()
                continue
            k, _, v = line.partition("=")
            res[(sec + "." if sec else "") + k.strip()] = v.strip()
        return res


class Page:
    """One page read back: its index in the layer table, valid tokens, the
    tier it was read from ("fast" or "host"), and K and V (ntok,
    n_kv_heads, head_dim) as bytes or numpy arrays."""
    __slots__ = ("page", "ntok", "tier", "id", "k", "v")

    def __init__(self, page, ntok, tier, pid, k, v):
        self.page, self.ntok, self.tier, self.id, self.k, self.v = page, ntok, tier, pid, k, v

    def __repr__(self):
        return "<kvtier.Page %d: %d tokens from %s>" % (self.page, self.ntok, self.tier)


class Pager:
    """A pager over a device ("cpu", "cuda" or "auto"). config: a Config,
    or a dict of keys for one; ini: an INI file read first. Close it (or use
    `with`): that closes its sequences and removes an NVMe file it made."""

    def __init__(self, config=None, ini=None, device="cpu", copy_gbps=0.0):
        lib = self._lib = _lib.load()
        self._p = self._dev = None
        cfg = config if isinstance(config, Config) else Config(config, ini=ini)
        cfg.validate()
        self.config = cfg
        v = cfg.values()
        self.layers = int(v.get("geometry.layers", 0))
        self.kv_heads = int(v.get("geometry.kv_heads", 0))
        self.head_dim = int(v.get("geometry.head_dim", 0))
        self.page_tokens = int(v.get("geometry.page_tokens", 0))
        self.dtype = v.get("geometry.dtype", "f16")
        self.dtype_bytes = 4 if self.dtype == "f32" else 2
        dev = c_void_p()
        why = ctypes.create_string_buffer(ERRLEN)
        check(lib.kvt_device_open_why(device.encode(), float(copy_gbps), byref(dev), why,
                                      ERRLEN), why, "device %s" % device)
        self._dev = dev
        p = c_void_p()
        rc = lib.kvt_pager_open(cfg._buf, dev, byref(p))
        if rc < 0:
            lib.kvt_device_close(dev)
            self._dev = None
            check(rc, what="opening the pager")
        self._p = p
        self.page_bytes = lib.kvt_pager_page_bytes(p)

    def close(self):
        """Close the pager and its device. KvtError (EBUSY) while a batch
        is held elsewhere; nothing is closed then."""
        if self._p:
            check(self._lib.kvt_pager_close(self._p), what="close")
            self._p = None
        if self._dev:
            self._lib.kvt_device_close(self._dev)
            self._dev = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _h(self):
        if not self._p:
            raise ValueError("the pager is closed")
        return self._p

    def token_bytes(self):
        """Bytes of K (or of V) for one token of one layer."""
        return self.kv_heads * self.head_dim * self.dtype_bytes

    def open_seq(self):
        s = c_uint64()
        check(self._lib.kvt_seq_open(self._h(), byref(s)), what="seq_open")
        return Sequence(self, s.value)

    def step(self):
        """Advance the decode step; returns the new step number."""
        return self._lib.kvt_pager_step(self._h())

    def set(self, key, value):
        """Change one key while the pager runs (kvt_pager_set)."""
        err = ctypes.create_string_buffer(ERRLEN)
        check(self._lib.kvt_pager_set(self._h(), key.encode(), _text(value).encode(), err,
                                      ERRLEN), err, key)

    def drain(self, tier):
        """Demote everything out of tier "fast" or "host" and wait."""
        if tier not in ("fast", "host"):
            raise ValueError("drain %r: want 'fast' or 'host'" % (tier,))
        check(self._lib.kvt_pager_drain(self._h(), TIERS[tier]), what="drain %s" % tier)

    def trace_start(self, path):
        """Record a trace (docs/trace-format.md) into path."""
        check(self._lib.kvt_pager_trace_start(self._h(), str(path).encode()),
              what="trace %s" % path)

    def trace_stop(self):
        check(self._lib.kvt_pager_trace_stop(self._h()), what="trace stop")

    def stats(self):
        """The statistics as kvt_stats_json writes them, parsed: a dict."""
        st = ctypes.create_string_buffer(STATS_ROOM)
        check(self._lib.kvt_pager_stats(self._h(), st), what="stats")
        out = ctypes.create_string_buffer(JSON_ROOM)
        n = check(self._lib.kvt_stats_json(st, out, JSON_ROOM), what="stats")
        return json.loads(out.raw[:n].decode())


class Sequence:
    """A sequence of a pager: a page table per layer."""

    def __init__(self, pager, handle):
        self.pager = pager
        self.handle = handle

    def __repr__(self):
        return "<kvtier.Sequence %#x>" % self.handle

    def _lib(self):
        return self.pager._lib

    def append(self, layer, k, v, ntok=None):
        """Append ntok tokens of one layer: k and v each hold (ntok,
        n_kv_heads, head_dim) elements of the page dtype, as bytes or any
        C-contiguous buffer (a numpy array). ntok defaults to what k holds."""
        tb = self.pager.token_bytes()
        mk, mv = memoryview(k).cast("B"), memoryview(v).cast("B")
        if ntok is None:
            ntok = mk.nbytes // tb
        if ntok <= 0 or mk.nbytes != ntok * tb or mv.nbytes != ntok * tb:
            raise ValueError("append: k %d bytes, v %d bytes: want %d tokens x %d bytes each"
                             % (mk.nbytes, mv.nbytes, ntok, tb))
        kb = (ctypes.c_char * mk.nbytes).from_buffer_copy(mk)
        vb = (ctypes.c_char * mv.nbytes).from_buffer_copy(mv)
        check(self._lib().kvt_seq_append(self.pager._h(), self.handle, layer, kb, vb, ntok),
              what="append layer %d" % layer)

    def tokens(self, layer=0):
        return check(self._lib().kvt_seq_tokens(self.pager._h(), self.handle, layer),
                     what="tokens")

    def pages(self, layer=0):
        return check(self._lib().kvt_seq_pages(self.pager._h(), self.handle, layer),
                     what="pages")

    def acquire(self, layer, pages=None, as_array=False):
        """Acquire pages of one layer (None: all of them) and read them:
        a list of Page in the order they became ready (resident first).
        The batch is released before this returns; K and V are copies.
        with as_array=True they are numpy arrays (ntok, n_kv_heads,
        head_dim) of float16 or float32 (bf16 comes as float16 bits: view
        them as you need). KvtError (EIO) when a page was lost."""
        lib, p = self._lib(), self.pager
        np_ = None
        if as_array:
            try:
                import numpy as np_
            except ImportError:
                raise ImportError("as_array=True needs numpy") from None
        if pages is None:
            arr, n = None, 0
        else:
            pages = [int(i) for i in pages]
            arr, n = (c_uint32 * len(pages))(*pages), len(pages)
        b = c_void_p()
        check(lib.kvt_acquire(p._h(), self.handle, layer, arr, n, byref(b)),
              what="acquire layer %d" % layer)
        out, lost = [], []
        view = _lib.View()
        tb = p.token_bytes()
        try:
            while True:
                rc = lib.kvt_batch_next(b, byref(view))
                if rc == 0:
                    break
                if rc == -5:            # -EIO: this page is lost; go on
                    lost.append(view.page)
                    continue
                check(rc, what="acquire layer %d" % layer)
                nb = view.ntok * tb
                kb = ctypes.create_string_buffer(nb)
                vb = ctypes.create_string_buffer(nb)
                dev = lib.kvt_pager_device(p._h())
                check(lib.kvt_device_read(dev, kb, view.k, nb), what="read K")
                check(lib.kvt_device_read(dev, vb, view.v, nb), what="read V")
                k, v = kb.raw, vb.raw
                if np_ is not None:
                    dt = np_.float32 if p.dtype_bytes == 4 else np_.float16
                    shape = (view.ntok, p.kv_heads, p.head_dim)
                    k = np_.frombuffer(k, dtype=dt).reshape(shape)
                    v = np_.frombuffer(v, dtype=dt).reshape(shape)
                tier = {0: "fast", 1: "host", 2: "nvme"}.get(view.tier, str(view.tier))
                out.append(Page(view.page, view.ntok, tier, view.id, k, v))
        finally:
            lib.kvt_batch_release(b)
        if lost:
            raise KvtError(-5, "acquire layer %d: pages lost: %s"
                           % (layer, ", ".join(map(str, lost))))
        return out

    def fork(self, ntok):
        """A new sequence sharing the first ntok tokens of every layer."""
        s = c_uint64()
        check(self._lib().kvt_seq_fork(self.pager._h(), self.handle, ntok, byref(s)),
              what="fork")
        return Sequence(self.pager, s.value)

    def park(self):
        check(self._lib().kvt_seq_park(self.pager._h(), self.handle), what="park")

    def resume(self):
        check(self._lib().kvt_seq_resume(self.pager._h(), self.handle), what="resume")

    def close(self):
        check(self._lib().kvt_seq_close(self.pager._h(), self.handle), what="close")
