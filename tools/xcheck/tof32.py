#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tof32.py IN.gguf OUT.gguf: the same model with every F16, BF16 and
quantized tensor (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K to Q6_K) stored as F32
holding exactly its dequantized values (metadata copied as it is).
llama.cpp rounds a matmul's activations to the weight's type; on the F32
copy it does not, which isolates how each engine reads the weights.

Written from ggml's block layouts (ggml-common.h) and its reference
dequantizers, not from kvtier's: every value is formed in double and
rounded once to f32, which equals ggml's f32 arithmetic because each of its
products of scales and quants is exact (q6_k's last one excepted, which
both round once)."""
import array
import math
import struct
import sys

F32, F16, Q8_0, BF16 = 0, 1, 8, 30
Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K = 2, 3, 6, 7, 10, 11, 12, 13, 14
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
    if ty in BLOCKS:
        blk, size, fn = BLOCKS[ty]
        out = []
        for i in range(0, n // blk * size, size):
            out.extend(fn(raw[i:i + size]))
        return array.array("f", out).tobytes()
    sys.exit(f"tensor type {ty} not handled")


def half(b, i):
    return struct.unpack_from("<e", b, i)[0]


def q4_0(b):
    d = half(b, 0)
    return [((q & 15) - 8) * d for q in b[2:18]] + [((q >> 4) - 8) * d for q in b[2:18]]


def q4_1(b):
    d, m = half(b, 0), half(b, 2)
    return [(q & 15) * d + m for q in b[4:20]] + [(q >> 4) * d + m for q in b[4:20]]


def q5(b, d, m, qh, qs, off):
    lo = [((qs[j] & 15) | ((qh >> j) & 1) << 4) - off for j in range(16)]
    hi = [((qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - off for j in range(16)]
    return [x * d if m is None else x * d + m for x in lo + hi]


def q5_0(b):
    return q5(b, half(b, 0), None, struct.unpack_from("<I", b, 2)[0], b[6:22], 16)


def q5_1(b):
    return q5(b, half(b, 0), half(b, 2), struct.unpack_from("<I", b, 4)[0], b[8:24], 0)


def q2_k(b):
    sc, qs, d, dmin = b[0:16], b[16:80], half(b, 80), half(b, 82)
    out = []
    for v in range(256):        # value v: 128-chunk n, 32-row j, lane l
        n, j, l = v // 128, v % 128 // 32, v % 32
        s = sc[v // 16]
        q = qs[n * 32 + l] >> (2 * j) & 3
        out.append(d * (s & 15) * q - dmin * (s >> 4))
    return out


def q3_k(b):
    hm, qs, raw, d = b[0:32], b[32:96], b[96:108], half(b, 108)
    sc = []
    for j in range(16):         # 6-bit scales: low nibbles, then 2 high bits
        lo = raw[j] & 15 if j < 8 else raw[j - 8] >> 4
        sc.append((lo | (raw[8 + j % 4] >> (2 * (j // 4)) & 3) << 4) - 32)
    out = []
    for v in range(256):
        n, j, l = v // 128, v % 128 // 32, v % 32
        q = (qs[n * 32 + l] >> (2 * j) & 3) - (0 if hm[l] >> (v // 32) & 1 else 4)
        out.append(d * sc[v // 16] * q)
    return out


def scale_min_k4(j, q):
    if j < 4:
        return q[j] & 63, q[j + 4] & 63
    return (q[j + 4] & 15) | (q[j - 4] >> 6) << 4, (q[j + 4] >> 4) | (q[j] >> 6) << 4


def q45_k(b, five):
    d, dmin, sc = half(b, 0), half(b, 2), b[4:16]
    qh, ql = (b[16:48], b[48:176]) if five else (None, b[16:144])
    out = []
    for v in range(256):        # value v: sub-block v // 32, in 64-chunk c
        c, half_, l = v // 64, v % 64 // 32, v % 32
        s, m = scale_min_k4(v // 32, sc)
        q = ql[c * 32 + l] >> (4 * half_) & 15
        if five:
            q |= (qh[l] >> (2 * c + half_) & 1) << 4
        out.append(d * s * q - dmin * m)
    return out


def q6_k(b):
    ql, qh, d = b[0:128], b[128:192], half(b, 208)
    sc = struct.unpack_from("<16b", b, 192)
    out = []
    for v in range(256):        # value v: 128-chunk n, 32-row k, lane l
        n, k, l = v // 128, v % 128 // 32, v % 32
        lo = ql[n * 64 + (k & 1) * 32 + l] >> (4 * (k >> 1)) & 15
        hi = qh[n * 32 + l] >> (2 * k) & 3
        out.append(d * sc[v // 16] * ((lo | hi << 4) - 32))
    return out


BLOCKS = {Q4_0: (32, 18, q4_0), Q4_1: (32, 20, q4_1), Q5_0: (32, 22, q5_0),
          Q5_1: (32, 24, q5_1), Q2_K: (256, 84, q2_k), Q3_K: (256, 110, q3_k),
          Q4_K: (256, 144, lambda b: q45_k(b, False)), Q5_K: (256, 176, lambda b: q45_k(b, True)),
          Q6_K: (256, 210, q6_k)}


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
