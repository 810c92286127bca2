"""Read a Hugging Face style checkpoint directory without extra packages.

A checkpoint is config.json plus safetensors files (one file, or shards
named by model.safetensors.index.json). A safetensors file is an 8-byte
little-endian header length, a JSON header mapping each tensor name to its
dtype, shape and byte range, then the raw little-endian data.

Values come back as float64 numpy arrays:
  - F32 and BF16 are widened exactly (bf16 is the top half of a float32);
  - F8_E4M3 weights are decoded from the e4m3 formula and multiplied by
    their float32 `weight_scale_inv`, one scale per 128x128 block of the
    [out, in] matrix, edge blocks partial:
        W[i, j] = e4m3(q[i, j]) * weight_scale_inv[i // 128, j // 128]
"""

import hashlib
import json
import os
import struct

import numpy as np

FP8_BLOCK = 128
SCALE_SUFFIX = "_scale_inv"


def e4m3_table():
    """All 256 float8_e4m3fn codes as float64, from the format's definition:
    sign bit, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 is
    subnormal (m * 2^-9); S.1111.111 is NaN; no infinities."""
    t = np.empty(256, dtype=np.float64)
    for b in range(256):
        s = -1.0 if b & 0x80 else 1.0
        e = (b >> 3) & 0xF
        m = b & 0x7
        if e == 0:
            v = m * 2.0 ** -9
        elif e == 15 and m == 7:
            v = float("nan")
        else:
            v = (1.0 + m / 8.0) * 2.0 ** (e - 7)
        t[b] = s * v
    return t


_E4M3 = e4m3_table()
# Anchors of the format: 1.0, the largest finite value, the smallest normal and subnormal, NaN.
assert _E4M3[0x38] == 1.0 and _E4M3[0x7E] == 448.0 and _E4M3[0xFE] == -448.0
assert _E4M3[0x08] == 2.0 ** -6 and _E4M3[0x01] == 2.0 ** -9 and np.isnan(_E4M3[0x7F]) and np.isnan(_E4M3[0xFF])


def read_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        if n > 100 << 20:
            raise ValueError(f"{path}: header of {n} bytes")
        header = json.loads(f.read(n))
    header.pop("__metadata__", None)
    return header, 8 + n


class Checkpoint:
    """Tensors of one checkpoint directory, by HF name."""

    def __init__(self, directory):
        self.dir = directory
        with open(os.path.join(directory, "config.json")) as f:
            self.config = json.load(f)
        index = os.path.join(directory, "model.safetensors.index.json")
        if os.path.exists(index):
            with open(index) as f:
                files = sorted(set(json.load(f)["weight_map"].values()))
        else:
            files = ["model.safetensors"]
        self.files = files
        self.where = {}
        for name in files:
            path = os.path.join(directory, name)
            if os.path.dirname(os.path.abspath(path)) != os.path.abspath(directory):
                raise ValueError(f"shard {name} lies outside {directory}")
            header, base = read_header(path)
            raw = np.memmap(path, dtype=np.uint8, mode="r")
            for tname, info in header.items():
                self.where[tname] = (raw, base, info)

    def names(self):
        return sorted(self.where)

    def sha256(self):
        """sha256 of every safetensors file, by file name."""
        out = {}
        for name in self.files:
            h = hashlib.sha256()
            with open(os.path.join(self.dir, name), "rb") as f:
                for chunk in iter(lambda: f.read(1 << 22), b""):
                    h.update(chunk)
            out[name] = h.hexdigest()
        return out

    def dtype(self, name):
        return self.where[name][2]["dtype"]

    def _raw(self, name):
        raw, base, info = self.where[name]
        b, e = info["data_offsets"]
        return raw[base + b: base + e], info["dtype"], tuple(info["shape"])

    def tensor(self, name):
        """The named tensor as float64 (fp8 weights dequantized)."""
        data, dtype, shape = self._raw(name)
        if dtype == "F32":
            v = data.view("<f4").astype(np.float64)
        elif dtype == "BF16":
            v = (data.view("<u2").astype(np.uint32) << 16).view("<f4").astype(np.float64)
        elif dtype == "F8_E4M3":
            return self._fp8(name, data, shape)
        else:
            raise ValueError(f"tensor {name}: dtype {dtype} not read")
        return v.reshape(shape)

    def _fp8(self, name, data, shape):
        if len(shape) != 2:
            raise ValueError(f"fp8 tensor {name} has shape {shape}, want [out, in]")
        sname = name + SCALE_SUFFIX
        if sname not in self.where:
            raise ValueError(f"fp8 tensor {name} has no {sname}")
        scale = self.tensor(sname)
        rows, cols = shape
        want = (-(-rows // FP8_BLOCK), -(-cols // FP8_BLOCK))
        if scale.shape != want:
            raise ValueError(f"{sname} has shape {scale.shape}, want {want}")
        q = _E4M3[np.asarray(data)].reshape(shape)
        s = np.repeat(np.repeat(scale, FP8_BLOCK, axis=0), FP8_BLOCK, axis=1)[:rows, :cols]
        return q * s
