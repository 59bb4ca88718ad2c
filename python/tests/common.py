# SPDX-License-Identifier: MIT
"""What the tests share: where the build is, a scratch folder, and the
policies written in Python that the tests hold against the built-in ones."""
import os
import shutil
import tempfile
from collections import OrderedDict

import kvtier

HERE = os.path.dirname(os.path.abspath(__file__))
TREE = os.path.normpath(os.path.join(HERE, "..", ".."))
# tests/t_python.sh sets KVT_BUILD (and KVT_LIB); run by hand, the tree's build/
BUILD = os.environ.get("KVT_BUILD") or os.path.join(TREE, "build")


def tool(name):
    path = os.path.join(BUILD, name)
    if not os.access(path, os.X_OK):
        raise RuntimeError("%s: not built (make tools)" % path)
    return path


def scratch(test):
    """A folder removed when the test case class is done."""
    d = tempfile.mkdtemp(prefix="kvt-py.", dir=os.environ.get("KVT_TEST_DIR"))
    test.addClassCleanup(shutil.rmtree, d, True)
    return d


class PyFIFO(kvtier.Policy):
    """FIFO in Python: the built-in fifo's rules (pager/policy/fifo.c)."""
    name = "pyfifo"

    def __init__(self, capacity, params=""):
        super().__init__(capacity, params)
        self.q = OrderedDict()          # oldest first

    def insert(self, ref):
        self.q[ref.key] = None

    def remove(self, key):
        del self.q[key]

    def victims(self, want, pinned):
        out = []
        for k in self.q:
            if not pinned(k):
                out.append(k)
                if len(out) == want:
                    break
        return out


class PyLRU(PyFIFO):
    """LRU in Python: FIFO whose accesses move a page to the newest end."""
    name = "pylru"

    def access(self, ref):
        self.q.move_to_end(ref.key)


class PyLIFO(PyFIFO):
    """LIFO in Python: the newest page goes first (pager/policy/lifo.c)."""
    name = "pylifo"

    def victims(self, want, pinned):
        out = []
        for k in reversed(self.q):
            if not pinned(k):
                out.append(k)
                if len(out) == want:
                    break
        return out
