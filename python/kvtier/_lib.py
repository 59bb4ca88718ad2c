# SPDX-License-Identifier: MIT
"""Finding libkvt.so and declaring the C functions the package calls.

The library is looked for, in order: the path in $KVT_LIB; build/libkvt.so
of the source tree this package sits in (python/kvtier/../../build); the
system's, through ctypes.util.find_library("kvt"). Nothing is loaded until
a function needs it.
"""
import ctypes
import ctypes.util
import os

from ctypes import (POINTER, c_char_p, c_double, c_int, c_size_t, c_uint,
                    c_uint8, c_uint32, c_uint64, c_void_p)


class KvtError(OSError):
    """A libkvt call failed: errno is the error, strerror the library's
    message (naming the file, offset, key or policy at fault)."""

    def __init__(self, rc, what):
        super().__init__(-rc if rc < 0 else rc, what)


def check(rc, err=None, what=""):
    """Raise KvtError for a negative rc, with the message left in err
    (a ctypes char buffer) or os.strerror; return rc otherwise."""
    if rc >= 0:
        return rc
    msg = err.value.decode(errors="replace") if err is not None and err.value else ""
    if not msg:
        msg = os.strerror(-rc)
    raise KvtError(rc, "%s: %s" % (what, msg) if what else msg)


# --- structures of the public headers (include/kvt/*.h) -------------------

class SimInfo(ctypes.Structure):            # struct kvt_sim_info
    _fields_ = [("records", c_uint64), ("refs", c_uint64), ("news", c_uint64),
                ("steps", c_uint64), ("pages", c_uint64), ("page_bytes", c_uint64),
                ("gaps", c_uint64), ("source", c_uint32), ("format", ctypes.c_char * 16)]


class SimLevel(ctypes.Structure):           # struct kvt_sim_level
    _fields_ = [("policy", c_char_p), ("ops", c_void_p), ("frames", c_uint64)]


class SimCounts(ctypes.Structure):          # struct kvt_sim_counts
    _fields_ = [("refs", c_uint64), ("hits", c_uint64), ("misses", c_uint64),
                ("promotions", c_uint64), ("demotions", c_uint64), ("drops", c_uint64),
                ("used", c_uint64)]


class View(ctypes.Structure):               # struct kvt_view
    _fields_ = [("k", c_void_p), ("v", c_void_p), ("id", c_uint64), ("page", c_uint32),
                ("ntok", c_uint32), ("tier", c_uint8)]


class Ref(ctypes.Structure):                # struct kvt_ref (pager/policy.h)
    _fields_ = [("key", c_uint64), ("time", c_uint64), ("step", c_uint64),
                ("next", c_uint64), ("seq", c_uint32), ("layer", c_uint32),
                ("index", c_uint32), ("score", ctypes.c_float)]


# struct kvt_policy_ops (pager/policy.h, the plug-in interface of
# docs/policies.md): a table of C function pointers.
POLICY_INIT = ctypes.CFUNCTYPE(c_int, POINTER(c_void_p), c_char_p, c_size_t, c_void_p, c_size_t)
POLICY_ABI = 1      # KVT_POLICY_ABI
POLICY_DESTROY = ctypes.CFUNCTYPE(None, c_void_p)
POLICY_EVENT = ctypes.CFUNCTYPE(None, c_void_p, POINTER(Ref), c_void_p)
POLICY_REMOVE = ctypes.CFUNCTYPE(None, c_void_p, c_uint64, c_void_p)
POLICY_PINNED = ctypes.CFUNCTYPE(c_int, c_void_p, c_uint64)
POLICY_VICTIMS = ctypes.CFUNCTYPE(c_size_t, c_void_p, POINTER(c_uint64), c_size_t,
                                  POLICY_PINNED, c_void_p)


class PolicyOps(ctypes.Structure):
    _fields_ = [("abi", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("name", c_char_p), ("meta_size", c_size_t), ("flags", c_uint),
                ("init", POLICY_INIT), ("destroy", POLICY_DESTROY),
                ("on_insert", POLICY_EVENT), ("on_access", POLICY_EVENT),
                ("on_score", POLICY_EVENT), ("on_remove", POLICY_REMOVE),
                ("victims", POLICY_VICTIMS)]


# --- the library -----------------------------------------------------------

_PROTOS = {
    # include/kvt/sim.h
    "kvt_sim_open": (c_int, [c_char_p, POINTER(c_void_p), c_char_p, c_size_t]),
    "kvt_sim_open_keys": (c_int, [POINTER(c_uint64), c_size_t, POINTER(c_void_p)]),
    "kvt_sim_close": (None, [c_void_p]),
    "kvt_sim_describe": (c_int, [c_void_p, POINTER(SimInfo)]),
    "kvt_sim_curve": (c_int, [c_void_p, POINTER(c_char_p), c_uint, POINTER(c_uint64), c_uint,
                              c_uint, POINTER(c_uint64), POINTER(c_uint64), POINTER(c_uint64),
                              c_char_p, c_size_t]),
    "kvt_sim_replay": (c_int, [c_void_p, POINTER(SimLevel), c_uint, c_int, POINTER(SimCounts),
                               c_char_p, c_size_t]),
    # include/kvt/config.h
    "kvt_config_default": (None, [c_void_p]),
    "kvt_config_set": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]),
    "kvt_config_load": (c_int, [c_void_p, c_char_p, c_char_p, c_size_t]),
    "kvt_config_validate": (c_int, [c_void_p, c_char_p, c_size_t]),
    "kvt_config_page_bytes": (c_uint64, [c_void_p]),
    "kvt_config_print": (c_int, [c_void_p, c_char_p, c_size_t]),
    # include/kvt/device.h
    "kvt_device_open_why": (c_int, [c_char_p, c_double, POINTER(c_void_p), c_char_p, c_size_t]),
    "kvt_device_close": (None, [c_void_p]),
    "kvt_device_read": (c_int, [c_void_p, c_void_p, c_void_p, c_size_t]),
    # include/kvt/pager.h
    "kvt_pager_open": (c_int, [c_void_p, c_void_p, POINTER(c_void_p)]),
    "kvt_pager_close": (c_int, [c_void_p]),
    "kvt_pager_device": (c_void_p, [c_void_p]),
    "kvt_pager_page_bytes": (c_size_t, [c_void_p]),
    "kvt_pager_set": (c_int, [c_void_p, c_char_p, c_char_p, c_char_p, c_size_t]),
    "kvt_pager_step": (c_uint64, [c_void_p]),
    "kvt_pager_stats": (c_int, [c_void_p, c_void_p]),
    "kvt_pager_drain": (c_int, [c_void_p, c_int]),
    "kvt_pager_trace_start": (c_int, [c_void_p, c_char_p]),
    "kvt_pager_trace_stop": (c_int, [c_void_p]),
    "kvt_stats_json": (c_int, [c_void_p, c_char_p, c_size_t]),
    "kvt_seq_open": (c_int, [c_void_p, POINTER(c_uint64)]),
    "kvt_seq_append": (c_int, [c_void_p, c_uint64, c_uint, c_void_p, c_void_p, c_uint]),
    "kvt_seq_tokens": (c_int, [c_void_p, c_uint64, c_uint]),
    "kvt_seq_pages": (c_int, [c_void_p, c_uint64, c_uint]),
    "kvt_seq_fork": (c_int, [c_void_p, c_uint64, c_uint, POINTER(c_uint64)]),
    "kvt_seq_park": (c_int, [c_void_p, c_uint64]),
    "kvt_seq_resume": (c_int, [c_void_p, c_uint64]),
    "kvt_seq_close": (c_int, [c_void_p, c_uint64]),
    "kvt_acquire": (c_int, [c_void_p, c_uint64, c_uint, POINTER(c_uint32), c_uint,
                            POINTER(c_void_p)]),
    "kvt_batch_next": (c_int, [c_void_p, POINTER(View)]),
    "kvt_batch_release": (None, [c_void_p]),
}

_lib = None
_path = None


def library_path():
    """The file load() opens (or would): $KVT_LIB, the tree's
    build/libkvt.so, or the system's libkvt; None when there is none."""
    env = os.environ.get("KVT_LIB")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.normpath(os.path.join(here, "..", "..", "build", "libkvt.so"))
    if os.path.exists(tree):
        return tree
    return ctypes.util.find_library("kvt")


def load():
    """The loaded libkvt.so with the prototypes set; raises OSError, naming
    where it looked, when it cannot be found or loaded."""
    global _lib, _path
    if _lib is not None:
        return _lib
    path = library_path()
    if not path:
        raise OSError("libkvt.so not found: set KVT_LIB, build the tree (make lib), "
                      "or install the library")
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise OSError("%s: %s" % (path, e)) from None
    for name, (res, args) in _PROTOS.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise OSError("%s: no symbol %s (a library older than this package)"
                          % (path, name)) from None
        fn.restype = res
        fn.argtypes = args
    _lib, _path = lib, path
    return lib


def loaded_path():
    """The path of the library loaded, or None before the first load()."""
    return _path
