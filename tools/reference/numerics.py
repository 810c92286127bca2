"""Number formats of the conformance reference, written from their
definitions: float8 e4m3fn (OCP, bias 7), bfloat16 round-to-nearest-even,
and the 656-byte fp8_ds_mla KV record.

Rounding is done on the value grid of the target format (exact float64
arithmetic on powers of two and Python's round-half-to-even), not by bit
manipulation, so that it checks bit-level implementations independently.
"""

import math
import struct

import numpy as np

E4M3_MAX = 448.0
E4M3_NAN = 0x7F
RECORD_BYTES = 656
LATENT = 512
ROPE = 64
TILE = 128


def e4m3_decode(byte):
    """Value of one float8 e4m3fn byte (S EEEE MMM) as a Python float."""
    sign = -1.0 if byte & 0x80 else 1.0
    e = (byte >> 3) & 0x0F
    m = byte & 0x07
    if e == 15 and m == 7:
        return math.nan
    if e == 0:
        return sign * m * 2.0**-9
    return sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)


E4M3_TABLE = np.array([e4m3_decode(b) for b in range(256)], dtype=np.float64)


def e4m3_encode(x):
    """Round-to-nearest-even float8 e4m3fn code of x (a float32 value).

    No saturation: magnitudes that round above 448 (|x| > 464) and
    infinities give the NaN code 0x7F with the sign of x, and a NaN gives
    0x7F.  The grid below 2^-6 is the subnormal grid of step 2^-9.
    """
    x = float(x)
    if math.isnan(x):
        return E4M3_NAN
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if math.isinf(a) or a >= 480.0:
        return sign | E4M3_NAN
    if a < 2.0**-6:
        m = round(a / 2.0**-9)  # exact quotient; round() is half-to-even
        if m == 8:
            return sign | 0x08
        return sign | m
    _, e2 = math.frexp(a)  # a = f * 2^e2, f in [0.5, 1)
    e = e2 - 1  # a in [2^e, 2^(e+1))
    step = 2.0 ** (e - 3)
    m = round(a / step)  # 8..16
    if m == 16:
        m = 8
        e += 1
    if e > 8:  # 2^9 and above cannot occur below 480
        return sign | E4M3_NAN
    code = ((e + 7) << 3) | (m - 8)
    return sign | code  # e=8, m=15 is 480 -> the NaN code, as intended


def bf16_bits(x):
    """Round-to-nearest-even bfloat16 bit pattern of a float32 value."""
    x = float(np.float32(x))
    if math.isnan(x):
        return 0x7FC0
    sign = 0x8000 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if math.isinf(a):
        return sign | 0x7F80
    if a == 0.0:
        return sign
    if a < 2.0**-126:
        step = 2.0**-133
    else:
        _, e2 = math.frexp(a)
        step = 2.0 ** (e2 - 1 - 7)
    v = round(a / step) * step
    if v >= 2.0**128:
        return sign | 0x7F80
    bits = struct.unpack("<I", struct.pack("<f", v))[0]
    assert bits & 0xFFFF == 0
    return sign | (bits >> 16)


def bf16_value(bits):
    return float(np.array([int(bits) << 16], dtype=np.uint32).view(np.float32)[0])


def bf16_round(x):
    """float32 array -> float32 array of bf16-representable values."""
    flat = np.asarray(x, dtype=np.float32).ravel()
    out = np.array([bf16_value(bf16_bits(v)) for v in flat], dtype=np.float32)
    return out.reshape(np.shape(x))


def pow2_scale(amax):
    """Smallest power of two >= max(amax/448, 1e-4), computed exactly."""
    target = max(float(amax) / E4M3_MAX, 1e-4)
    f, e = math.frexp(target)  # target = f * 2^e, f in [0.5, 1)
    if f == 0.5:
        return 2.0 ** (e - 1)
    return 2.0**e


def ds_mla_encode(row):
    """576 float32 values -> one 656-byte fp8_ds_mla record (bytes).

    Dims 0..511 are quantized per 128-wide tile with a power-of-two scale;
    dims 512..575 are stored as bfloat16 (RNE)."""
    row = np.asarray(row, dtype=np.float32)
    assert row.shape == (LATENT + ROPE,)
    out = bytearray(RECORD_BYTES)
    for j in range(LATENT // TILE):
        tile = row[j * TILE : (j + 1) * TILE].astype(np.float64)
        s = pow2_scale(np.max(np.abs(tile)))
        for d in range(TILE):
            out[j * TILE + d] = e4m3_encode(tile[d] / s)
        out[LATENT + 4 * j : LATENT + 4 * j + 4] = struct.pack("<f", s)
    for i in range(ROPE):
        out[528 + 2 * i : 530 + 2 * i] = struct.pack("<H", bf16_bits(row[LATENT + i]))
    return bytes(out)


def ds_mla_encode_unrounded_scale(row):
    """Like ds_mla_encode but with the scale amax/448 rounded only to
    float32 (no power of two) and codes clamped to +-448 before rounding:
    records in the style of writers that skip the power-of-two step."""
    row = np.asarray(row, dtype=np.float32)
    out = bytearray(RECORD_BYTES)
    for j in range(LATENT // TILE):
        tile = row[j * TILE : (j + 1) * TILE].astype(np.float64)
        s = float(np.float32(max(np.max(np.abs(tile)) / E4M3_MAX, 2.0**-126)))
        for d in range(TILE):
            v = min(max(tile[d] / s, -E4M3_MAX), E4M3_MAX)
            out[j * TILE + d] = e4m3_encode(v)
        out[LATENT + 4 * j : LATENT + 4 * j + 4] = struct.pack("<f", s)
    for i in range(ROPE):
        out[528 + 2 * i : 530 + 2 * i] = struct.pack("<H", bf16_bits(row[LATENT + i]))
    return bytes(out)


def ds_mla_decode(rec):
    """One 656-byte record -> 576 values (float64), each the exact product
    e4m3 * scale rounded once to float32, and the bf16 RoPE part."""
    rec = bytes(rec)
    assert len(rec) == RECORD_BYTES
    out = np.empty(LATENT + ROPE, dtype=np.float64)
    for j in range(LATENT // TILE):
        (s,) = struct.unpack("<f", rec[LATENT + 4 * j : LATENT + 4 * j + 4])
        for d in range(TILE):
            v = E4M3_TABLE[rec[j * TILE + d]] * s  # exact in float64
            out[j * TILE + d] = float(np.float32(v))
    for i in range(ROPE):
        (b,) = struct.unpack("<H", rec[528 + 2 * i : 530 + 2 * i])
        out[LATENT + i] = bf16_value(b)
    return out
