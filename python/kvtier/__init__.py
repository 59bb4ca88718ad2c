# SPDX-License-Identifier: MIT
"""kvtier from Python: traces, replays and miss-ratio curves with kvt-sim's
engine, policies written in Python, and the live pager, all through ctypes
over libkvt.so. Standard library only; numpy is used where asked for
(as_array=True). python/README.md has a worked example.

The library is found through $KVT_LIB, then build/libkvt.so of the tree
this package sits in, then the system's (ctypes.util.find_library).
"""
from ._lib import KvtError, library_path, load as load_library
from .pager import Config, Page, Pager, Sequence
from .sim import Curve, Point, Policy, Trace

__all__ = ["KvtError", "library_path", "load_library", "Config", "Page", "Pager", "Sequence",
           "Curve", "Point", "Policy", "Trace"]
