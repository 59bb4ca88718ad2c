#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tof32.py IN.gguf OUT.gguf: the same model with every F16, BF16 and Q8_0
tensor stored as F32 holding exactly its dequantized values (metadata copied
as it is). llama.cpp rounds a matmul's activations to the weight's type; on
the F32 copy it does not, which isolates how each engine reads the weights."""
import array
import math
import struct
import sys

F32, F16, Q8_0, BF16 = 0, 1, 8, 30
SCALAR = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?",
          10: "Q", 11: "q", 12: "d"}
STRING, ARRAY = 8, 9


class Reader:
    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def get(self, fmt):
        v = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.get("Q")
        s = self.buf[self.pos:self.pos + n]
        self.pos += n
        return s

    def skip(self, t):
        if t == STRING:
            self.string()
        elif t == ARRAY:
            et, n = self.get("I"), self.get("Q")
            for _ in range(n):
                self.skip(et)
        else:
            self.pos += struct.calcsize("<" + SCALAR[t])


def dequant(ty, raw, n):
    if ty == F32:
        return raw[:4 * n]
    if ty == F16:
        return array.array("f", struct.unpack(f"<{n}e", raw[:2 * n])).tobytes()
    if ty == BF16:
        h = array.array("H", raw[:2 * n])
        return array.array("I", (x << 16 for x in h)).tobytes()
    if ty == Q8_0:		# blocks of an f16 scale and 32 int8: d * q is exact in f32
        out = array.array("f")
        for i in range(0, n // 32 * 34, 34):
            d = struct.unpack_from("<e", raw, i)[0]
            out.extend(d * q for q in struct.unpack_from("<32b", raw, i + 2))
        return out.tobytes()
    sys.exit(f"tensor type {ty} not handled")


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src = open(sys.argv[1], "rb").read()
    r = Reader(src)
    if r.buf[:4] != b"GGUF":
        sys.exit(f"{sys.argv[1]}: not a GGUF file")
    r.pos = 4
    version, n_tensors, n_kv = r.get("I"), r.get("Q"), r.get("Q")
    kv_start, align = r.pos, 32
    for _ in range(n_kv):
        key, t = r.string(), r.get("I")
        if key == b"general.alignment":
            align = struct.unpack_from("<I", src, r.pos)[0]
        r.skip(t)
    kv = src[kv_start:r.pos]
    infos = []
    for _ in range(n_tensors):
        name, nd = r.string(), r.get("I")
        dims = [r.get("Q") for _ in range(nd)]
        infos.append((name, dims, r.get("I"), r.get("Q")))
    data = (r.pos + align - 1) // align * align

    pad = lambda n: (-n) % align
    blobs = [dequant(ty, src[data + off:], math.prod(dims)) for _, dims, ty, off in infos]
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, n_tensors, n_kv) + kv)
    off = 0
    for (name, dims, _, _), blob in zip(infos, blobs):
        out += struct.pack("<Q", len(name)) + name + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", F32, off)
        off += len(blob) + pad(len(blob))
    out += b"\0" * pad(len(out))
    for blob in blobs:
        out += blob + b"\0" * pad(len(blob))
    with open(sys.argv[2], "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
