#!/usr/bin/env python3
"""Generate the kernel conformance cases under testdata/conformance/.

For every kernel this writes several `<kernel>/<case>.in.safetensors`
(metadata "kernel" plus the kernel's parameters, all strings; input
tensors) and `<case>.want.safetensors` (the expected output tensors
computed in float64 by kernels.py), then `manifest.json` listing each case
with its kernel, seed, tensor shapes, sha256 of both files and the
tolerance of each output tensor.

Run from the repository root:  python3 tools/reference/gen.py
Needs Python 3 and numpy only.  CI never runs it; it checks the engine
against the committed files.
"""

import hashlib
import json
import math
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # keep the source tree free of __pycache__

import kernels as K  # noqa: E402
import numerics as N  # noqa: E402
import safetensors_io as st  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
OUT_DIR = os.path.join(ROOT, "testdata", "conformance")

# Tolerances per kernel and output tensor.  "close": FlashMLA comparator
# (inf/NaN positions equal; |a-r| < abs or |a-r|/(|r|+1e-6) < rel;
# cos_diff < cos_diff when cos_diff > 0).  "exact": every element equal.
# "topk": exact except positions the want file's tie tensor marks.
# The sparse-attention numbers are FlashMLA's test thresholds; the others
# are sized for float32 arithmetic against a float64 reference.
TOLERANCES = {
    "sparse_mla_prefill": {
        "out": {"kind": "close", "abs": 8e-4, "rel": 3.01 / 128, "cos_diff": 7e-6},
        "lse": {"kind": "close", "abs": 1e-6, "rel": 2.01 / 65536, "cos_diff": 0},
        "max_logits": {"kind": "close", "abs": 1e-6, "rel": 2.01 / 65536, "cos_diff": 0},
    },
    "sparse_mla_decode": {
        "out": {"kind": "close", "abs": 1e-3, "rel": 2.01 / 128, "cos_diff": 5e-6},
        "lse": {"kind": "close", "abs": 1e-6, "rel": 8.01 / 65536, "cos_diff": 0},
    },
    "fp8_ds_mla_quantize": {"records": {"kind": "exact"}},
    "fp8_ds_mla_dequantize": {"kv": {"kind": "exact"}},
    "indexer_topk": {
        "scores": {"kind": "close", "abs": 1e-5, "rel": 1e-5, "cos_diff": 0},
        "indices": {"kind": "topk", "scores": "scores", "ties": "indices_tie"},
    },
    "lse_combine": {
        "out": {"kind": "close", "abs": 1e-6, "rel": 1e-5, "cos_diff": 1e-10},
        "lse": {"kind": "close", "abs": 1e-6, "rel": 1e-6, "cos_diff": 0},
    },
    "dcp_local_seq_lens": {"local_seq_lens": {"kind": "exact"}},
    "dcp_localize_indices": {
        "slots": {"kind": "exact"},
        "valid_counts": {"kind": "exact"},
    },
}


def tie_tau(score):
    """Scores closer than this may be ordered either way by float32 math:
    twice the scores tolerance."""
    t = TOLERANCES["indexer_topk"]["scores"]
    return 2.0 * (t["abs"] + t["rel"] * abs(score))


def f32(x):
    return np.asarray(x, dtype=np.float32)


def fmt_f32(x):
    """Shortest decimal string that parses back to the same float32."""
    v = np.float32(x)
    return np.format_float_positional(v, unique=True, trim="-") if abs(v) >= 1e-4 else repr(float(v))


def bf16_randn(rng, shape, scale=1.0, shift=None, clamp=None):
    x = rng.standard_normal(shape) * scale
    if shift is not None:
        x = x + rng.uniform(-shift, shift, shape)
    if clamp is not None:
        x = np.clip(x, -clamp, clamp)
    return N.bf16_round(f32(x))


class Writer:
    def __init__(self):
        self.cases = []

    def emit(self, kernel, name, seed, meta, inputs, wants):
        d = os.path.join(OUT_DIR, kernel)
        os.makedirs(d, exist_ok=True)
        meta = dict(meta)
        meta["kernel"] = kernel
        in_path = os.path.join(d, name + ".in.safetensors")
        want_path = os.path.join(d, name + ".want.safetensors")
        st.write(in_path, inputs, meta)
        st.write(want_path, wants, {"kernel": kernel, "case": name})
        tol = TOLERANCES[kernel]
        for n, _ in [(e[0], e[1]) for e in wants]:
            if n not in tol and not n.endswith("_tie"):
                raise ValueError("no tolerance for %s/%s" % (kernel, n))
        self.cases.append(
            {
                "name": name,
                "kernel": kernel,
                "seed": seed,
                "metadata": meta,
                "in": {"path": os.path.relpath(in_path, OUT_DIR), "sha256": sha256(in_path)},
                "want": {"path": os.path.relpath(want_path, OUT_DIR), "sha256": sha256(want_path)},
                "shapes": {e[0]: list(np.shape(e[1])) for e in list(inputs) + list(wants)},
                "tolerance": tol,
            }
        )
        print("wrote %-24s %s" % (kernel, name))

    def manifest(self):
        path = os.path.join(OUT_DIR, "manifest.json")
        doc = {
            "generator": "tools/reference/gen.py",
            "numpy": np.__version__,
            "cases": self.cases,
        }
        with open(path, "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


# ---------------------------------------------------------------- prefill

FILLERS = [-(2**31), -123456, -1, None, 114514, 1919810, 2147480000, 2**31 - 1]  # None = s_kv


def prefill_indices(rng, s_q, s_kv, topk, invalid_frac):
    idx = np.empty((s_q, topk), dtype=np.int64)
    for i in range(s_q):
        n_valid = min(topk, s_kv)
        row = list(rng.permutation(s_kv)[:n_valid])
        row += [None] * (topk - n_valid)
        for j in range(n_valid):
            if rng.uniform() < invalid_frac:
                row[j] = None
        row = [FILLERS[rng.integers(len(FILLERS))] if v is None else v for v in row]
        row = [s_kv if v is None else v for v in row]
        idx[i] = rng.permutation(row)
    return idx.astype(np.int32)


def gen_prefill(w):
    kernel = "sparse_mla_prefill"
    specs = [
        # name, seed, s_q, h_q, s_kv, topk, invalid_frac, topk_length, sm_scale, q scale
        ("h4_sq13_kv128_k128", 101, 13, 4, 128, 128, 0.1, False, 0.5, 0.1),
        ("h64_sq1_kv95_k128", 102, 1, 64, 95, 128, 0.0, False, 0.5, 0.1),
        ("h4_sq13_kv32_k64_topklen", 103, 13, 4, 32, 64, 0.2, True, 0.0625, 0.1),
        ("h4_sq4_kv16_k8_corners", 104, 4, 4, 16, 8, 0.0, True, 0.5, 1.0),
    ]
    for name, seed, s_q, h_q, s_kv, topk, inv, use_len, scale, qs in specs:
        rng = np.random.default_rng(seed)
        q = bf16_randn(rng, (s_q, h_q, K.D_QK), scale=qs, shift=0.05, clamp=10)
        kv = bf16_randn(rng, (s_kv, K.D_QK), scale=0.1, shift=0.05, clamp=10)
        idx = prefill_indices(rng, s_q, s_kv, topk, inv)
        tl = None
        if use_len:
            tl = np.minimum(rng.integers(0, max(topk + 1, 64), s_q), topk).astype(np.int32)
        if name.endswith("corners"):
            idx[0, :] = [-1, s_kv, -(2**31), 2**31 - 1, -5, s_kv + 1, 114514, -123456]  # all invalid
            idx[1, :] = [7, -1, -1, -1, -1, -1, -1, -1]  # one valid key
            tl[:] = [topk, topk, 0, 5]  # row 2: nothing counts
            idx[3, 5:] = [0, 1, 2]  # beyond topk_length: must be ignored
        elif use_len:
            idx[3, :] = FILLERS[0]  # an all-invalid row
            tl[5] = 0
            tl[6] = topk
        smf = float(np.float32(scale))
        out, lse, ml = K.sparse_prefill(q, kv, idx, smf, K.D_V, tl)
        inputs = [("q", q), ("kv", kv), ("indices", idx)]
        if tl is not None:
            inputs.append(("topk_length", tl))
        w.emit(
            kernel, name, seed, {"sm_scale": fmt_f32(scale), "d_v": str(K.D_V)}, inputs,
            [("out", f32(out)), ("lse", f32(lse)), ("max_logits", f32(ml))],
        )


# ---------------------------------------------------------------- decode

NAN_RECORD = bytes([N.E4M3_NAN] * 512) + bytes.fromhex("0000c07f") * 4 + bytes.fromhex("c07f") * 64


def gen_decode(w):
    kernel = "sparse_mla_decode"
    specs = [
        # name, seed, b, s_q, h_q, page, seq_lens, topk, neg_frac, topk_length
        ("b2_sq1_h4_p61", 201, 2, 1, 4, 61, [128, 100], 64, 0.1, None),
        ("b2_sq2_h4_p64_topklen", 202, 2, 2, 4, 64, [100, 37], 64, 0.05, [50, 0]),
        ("b2_sq1_h64_p2", 203, 2, 1, 64, 2, [40, 64], 64, 0.0, None),
    ]
    for name, seed, b, s_q, h_q, page, seq_lens, topk, neg, tl in specs:
        rng = np.random.default_rng(seed)
        nblk = [-(-s // page) for s in seq_lens]
        total = sum(nblk) + 2  # two never-used blocks
        perm = rng.permutation(total)
        tables, at = [], 0
        for nb in nblk:
            tables.append([int(x) for x in perm[at : at + nb]])
            at += nb
        recs = [NAN_RECORD] * (total * page)
        rows = bf16_randn(rng, (sum(seq_lens), K.D_QK), scale=0.1, clamp=1)
        r = 0
        for bi, s in enumerate(seq_lens):
            for p in range(s):
                slot = tables[bi][p // page] * page + p % page
                recs[slot] = N.ds_mla_encode(rows[r])
                r += 1
        cache = np.frombuffer(b"".join(recs), dtype=np.uint8).reshape(total, page, N.RECORD_BYTES)
        q = bf16_randn(rng, (b, s_q, h_q, K.D_QK), clamp=1)
        idx = np.full((b, s_q, topk), -1, dtype=np.int32)
        poisoned = [i for i in range(total * page) if recs[i] is NAN_RECORD]
        for bi, s in enumerate(seq_lens):
            for i in range(s_q):
                n = min(topk, s)
                pos = list(rng.permutation(s)[:n]) + [-1] * (topk - n)
                pos = [-1 if rng.uniform() < neg else p for p in pos]
                pos = rng.permutation(pos)
                idx[bi, i] = [-1 if p < 0 else tables[bi][p // page] * page + p % page for p in pos]
                if tl is not None:
                    # entries past topk_length point at poisoned rows: never read them
                    idx[bi, i, tl[bi]:] = rng.choice(poisoned, topk - tl[bi])
        tla = None if tl is None else np.array(tl, dtype=np.int32)
        scale = 576.0**-0.55
        out, lse = K.sparse_decode(q, cache, idx, float(np.float32(scale)), tla)
        inputs = [("q", q), ("kv_cache", cache), ("indices", idx)]
        if tla is not None:
            inputs.append(("topk_length", tla))
        w.emit(
            kernel, name, seed, {"sm_scale": fmt_f32(scale), "page_size": str(page)}, inputs,
            [("out", f32(out)), ("lse", f32(lse))],
        )


# ---------------------------------------------------------------- fp8_ds_mla


def edge_rows():
    rows = np.zeros((8, K.D_QK), dtype=np.float32)
    ramp = np.linspace(-1.0, 1.0, 128)
    # 0: zeros, negative zeros and tiny negatives that round to -0
    rows[0, 1::2] = -0.0
    rows[0, 128:256] = 1e-5
    rows[0, 130] = -1e-9
    # 1: tile maxima exactly 448 * 2^k
    for j, k in enumerate([-3, 0, 2, -10]):
        rows[1, j * 128 : (j + 1) * 128] = ramp * 448.0 * 2.0**k
    # 2: one outlier per tile
    rows[2, :512] = ramp.tolist() * 4
    for j in range(4):
        rows[2, j * 128 + 17 * (j + 1)] = 1000.0 * (-1) ** j
    # 3: tiny values (scale floor 2^-13, subnormal codes)
    rows[3, :512] = np.linspace(-1e-6, 1e-6, 512)
    # 4: scale 1 and e4m3 halfway points (round half to even)
    halves = [8.5, 9.5, -8.5, -9.5, 2.0**-10, 3 * 2.0**-10, 432.0, -432.0, 464.0 - 0.0, 0.0546875, 15.5, 0.9375 + 1 / 32]
    rows[4, :128] = 0.0
    rows[4, 0] = 448.0
    rows[4, 1 : 1 + len(halves)] = halves
    rows[4, 128:256] = -448.0 * ramp[::-1]
    # 5: tile maxima just above 448 * 2^k (scale doubles)
    for j, k in enumerate([0, -4, 3, -8]):
        top = np.nextafter(np.float32(448.0 * 2.0**k), np.float32(np.inf))
        rows[5, j * 128 : (j + 1) * 128] = ramp * float(top)
    # 6: rope part at bf16 halfway points and extremes
    rope = [1 + 2.0**-8, 1 + 3 * 2.0**-8, -(1 + 2.0**-8), 3.4028234663852886e38, -3.4028234663852886e38,
            2.0**-130, -0.0, 1e-40, 65504.5, 0.1, -0.3, 3.0e38]
    rows[6, :512] = ramp.tolist() * 4
    rows[6, 512 : 512 + len(rope)] = rope
    # 7: negative amax, mixed magnitudes
    rows[7, :512] = np.linspace(-3.0, 0.01, 512)
    rows[7, 512:] = np.linspace(-2.0, 2.0, 64)
    return f32(rows)


def gen_ds_mla(w):
    rng = np.random.default_rng(301)
    rand = bf16_randn(rng, (64, K.D_QK), scale=0.1, clamp=1)
    for name, seed, kv in [("random64", 301, rand), ("edges", 302, edge_rows())]:
        if name == "edges":
            rng2 = np.random.default_rng(seed)
            kv = np.concatenate([kv, f32(rng2.standard_normal((8, K.D_QK)) * 3)])  # not bf16 values
        recs = np.frombuffer(b"".join(N.ds_mla_encode(r) for r in kv), dtype=np.uint8).reshape(-1, N.RECORD_BYTES)
        w.emit("fp8_ds_mla_quantize", name, seed, {}, [("kv", kv)], [("records", recs)])

    # dequantize: every e4m3 code under several power-of-two scales, bf16 rope patterns
    rows = []
    rope_bits = [0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x807F, 0x3F80, 0x7F7F, 0xC2F7]
    for scales in ([1.0, 2.0**-13, 32.0, 0.5], [2.0**-20, 2.0**10, 1.0, 0.0]):
        rec = bytearray(N.RECORD_BYTES)
        rec[:512] = bytes(range(256)) * 2
        for j, s in enumerate(scales):
            rec[512 + 4 * j : 516 + 4 * j] = np.float32(s).tobytes()
        for i in range(64):
            rec[528 + 2 * i : 530 + 2 * i] = int(rope_bits[i % len(rope_bits)] + (i // len(rope_bits))).to_bytes(2, "little")
        rows.append(bytes(rec))
    recs = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, N.RECORD_BYTES)
    w.emit("fp8_ds_mla_dequantize", "all_codes", 0, {}, [("records", recs)],
           [("kv", f32(np.stack([N.ds_mla_decode(r) for r in rows])))])

    rng = np.random.default_rng(303)
    src = bf16_randn(rng, (16, K.D_QK), scale=0.1, clamp=1)
    rows = [N.ds_mla_encode(r) for r in src]
    recs = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, N.RECORD_BYTES)
    w.emit("fp8_ds_mla_dequantize", "roundtrip16", 303, {}, [("records", recs)],
           [("kv", f32(np.stack([N.ds_mla_decode(r) for r in rows])))])

    rng = np.random.default_rng(304)
    src = bf16_randn(rng, (8, K.D_QK), scale=0.7, clamp=4)
    rows = [N.ds_mla_encode_unrounded_scale(r) for r in src]
    recs = np.frombuffer(b"".join(rows), dtype=np.uint8).reshape(-1, N.RECORD_BYTES)
    w.emit("fp8_ds_mla_dequantize", "unrounded_scales8", 304, {}, [("records", recs)],
           [("kv", f32(np.stack([N.ds_mla_decode(r) for r in rows])))])


# ---------------------------------------------------------------- indexer


def gen_indexer(w):
    kernel = "indexer_topk"
    specs = [
        # name, seed, T, S, H, d, topk, ends
        ("prefill_t40_h4_k16_tie", 401, 40, 40, 4, 128, 16, "causal"),
        ("decode_t4_s70_h8_k16", 402, 4, 70, 8, 128, 16, [0, 68, 69, 70]),
        ("zero_scores_t6_s24_k12", 403, 6, 24, 2, 16, 12, [24, 24, 5, 12, 13, 1]),
    ]
    for name, seed, t_n, s_n, h_n, d, topk, ends in specs:
        rng = np.random.default_rng(seed)
        q = bf16_randn(rng, (t_n, h_n, d))
        k = bf16_randn(rng, (s_n, d))
        wts = bf16_randn(rng, (t_n, h_n), scale=h_n**-0.5 * d**-0.5)
        ends = np.arange(1, t_n + 1, dtype=np.int32) if ends == "causal" else np.array(ends, dtype=np.int32)
        if name.startswith("zero_scores"):
            # non-negative weights and, for most keys, negative dot products
            # with every head: many exact zero scores, ordered by index
            wts = np.abs(wts)
            q = -np.abs(q)
            k[: s_n * 2 // 3] = np.abs(k[: s_n * 2 // 3])
        if name.endswith("_tie"):
            # duplicate the key at rank topk-1 of row t0 into a lower,
            # unselected index: the two tie exactly at the boundary and the
            # lower index must win
            t0 = 35
            sc = K.indexer_scores(q, k, wts, ends)
            order = sorted(range(ends[t0]), key=lambda s: (-sc[t0, s], s))
            last = order[topk - 1]
            low = min(s for s in order[topk:] if s < last)
            k[low] = k[last]
        scores = K.indexer_scores(q, k, wts, ends)
        idx = K.indexer_topk(scores, ends, topk)
        ties = K.topk_ties(scores, ends, idx, tie_tau)
        w.emit(
            kernel, name, seed, {"topk": str(topk)},
            [("q", q), ("k", k), ("w", wts), ("ends", ends)],
            [("scores", f32(scores)), ("indices", idx), ("indices_tie", ties)],
        )


# ---------------------------------------------------------------- LSE combine


def gen_combine(w):
    kernel = "lse_combine"
    specs = [("n3_t4_h4_d64", 501, 3, 4, 4, 64), ("n5_t3_h2_d512", 502, 5, 3, 2, 512),
             ("n1_t2_h2_d8", 503, 1, 2, 2, 8), ("n2_t2_h3_d16_equal", 504, 2, 2, 3, 16)]
    for name, seed, n, t_n, h_n, d in specs:
        rng = np.random.default_rng(seed)
        out = f32(rng.standard_normal((n, t_n, h_n, d)))
        lse = f32(rng.uniform(-5, 12, (n, t_n, h_n)))
        empties = [math.nan, math.inf, -math.inf]
        if name.startswith("n3"):
            lse[0, 0, 0], lse[1, 0, 1], lse[2, 0, 2] = math.nan, math.inf, -math.inf
            lse[:, 1, 0] = [math.nan, math.inf, -math.inf]  # all empty
            lse[:, 1, 1] = [80.0, -80.0, 0.0]  # wide spread
            lse[:, 1, 2] = [1e-3, 2e-3, 3e-3]
            lse[:, 2, 3] = [-math.inf, 95.5, -math.inf]
        elif name.startswith("n5"):
            for r in range(n):
                lse[r, r % t_n, r % h_n] = empties[r % 3]
            lse[:, 2, 1] = math.nan  # all empty
            lse[:, 0, 1] = [-300.0, -301.0, -299.5, 40.0, -math.inf]
        elif name.startswith("n1"):
            lse[0, 0, 0] = math.inf
            lse[0, 1, 1] = math.nan
        else:
            lse[1] = lse[0]
        for r in range(n):
            for t in range(t_n):
                for h in range(h_n):
                    v = float(lse[r, t, h])
                    if math.isnan(v) or math.isinf(v):
                        out[r, t, h] = math.nan  # an empty rank's output is never read
        res, res_lse = K.lse_combine(out, lse)
        w.emit(kernel, name, seed, {}, [("out", out), ("lse", lse)],
               [("out", f32(res)), ("lse", f32(res_lse))])


# ---------------------------------------------------------------- DCP index maps


def gen_dcp(w):
    kernel = "dcp_local_seq_lens"
    # documented constant: get_dcp_local_seq_lens([8,9,10], N=2, r=1) == [4,4,5]
    specs = [("anchor_n2_r1_i1", 0, [8, 9, 10], 2, 1, 1)]
    rng = np.random.default_rng(601)
    sweep = list(range(0, 41)) + [int(x) for x in rng.integers(41, 22861, 20)] + [22860, 2**31 - 1]
    for n, r, i in [(1, 0, 1), (3, 0, 1), (3, 2, 4), (3, 1, 16), (8, 7, 2), (4, 3, 64)]:
        specs.append(("n%d_r%d_i%d" % (n, r, i), 601, sweep, n, r, i))
    for name, seed, seqs, n, r, i in specs:
        got = [K.dcp_local_seq_len(s, n, r, i) for s in seqs]
        for s, g in zip(seqs, got):
            if s <= 4096:
                assert g == K.dcp_local_seq_len_count(s, n, r, i)
        if name.startswith("anchor"):
            assert got == [4, 4, 5]
        w.emit(kernel, name, seed, {"dcp_size": str(n), "dcp_rank": str(r), "interleave": str(i)},
               [("seq_lens", np.array(seqs, dtype=np.int32))],
               [("local_seq_lens", np.array(got, dtype=np.int32))])

    kernel = "dcp_localize_indices"
    anchors = [
        ("anchor_compact", [[11, 2, 7, 5]], [[8, 5, 130, 7, -1, 262]], 64, 2, 0, 1, True,
         [[708, 129, 451, -1, -1, -1]], [3]),
        ("anchor_in_place", [[11, 2, 7, 5]], [[8, 5, 130, 7, -1, 262]], 64, 2, 0, 1, False,
         [[708, -1, 129, -1, -1, 451]], [3]),
        ("anchor_b4_block10", [[10]], [list(range(8))], 4, 2, 0, 1, True,
         [[40, 41, 42, 43, -1, -1, -1, -1]], [4]),
    ]
    for name, bt, idx, bs, n, r, i, compact, want_slots, want_counts in anchors:
        bt, idx = np.array(bt, dtype=np.int32), np.array(idx, dtype=np.int32)
        req = np.zeros(idx.shape[0], dtype=np.int32)
        slots, counts = K.dcp_localize(idx, bt, req, bs, n, r, i, compact)
        assert slots.tolist() == want_slots and counts.tolist() == want_counts, name
        emit_localize(w, name, 0, bt, idx, req, bs, n, r, i, compact, slots, counts)
    for name, seed, r_n, mb, t_n, k_n, bs, n, r, i, compact in [
        ("n4_r1_i2_b8_compact", 602, 3, 5, 7, 16, 8, 4, 1, 2, True),
        ("n3_r2_i4_b16_in_place", 603, 2, 4, 6, 24, 16, 3, 2, 4, False),
        ("n1_r0_i1_b4_compact", 604, 2, 3, 4, 8, 4, 1, 0, 1, True),
    ]:
        rng = np.random.default_rng(seed)
        bt = rng.integers(0, 1000, (r_n, mb)).astype(np.int32)
        span = mb * bs * n + 3 * bs  # some positions fall past the block table
        idx = rng.integers(-1, span, (t_n, k_n)).astype(np.int32)
        idx[rng.uniform(size=idx.shape) < 0.15] = -1
        req = rng.integers(0, r_n, t_n).astype(np.int32)
        if compact:
            bt[req[0], 0] = -1  # an unallocated block: its positions are dropped
        slots, counts = K.dcp_localize(idx, bt, req, bs, n, r, i, compact)
        emit_localize(w, name, seed, bt, idx, req, bs, n, r, i, compact, slots, counts)


def emit_localize(w, name, seed, bt, idx, req, bs, n, r, i, compact, slots, counts):
    meta = {"block_size": str(bs), "dcp_size": str(n), "dcp_rank": str(r), "interleave": str(i),
            "compact": "true" if compact else "false"}
    w.emit("dcp_localize_indices", name, seed, meta,
           [("indices", idx), ("block_table", bt), ("req_id", req)],
           [("slots", slots.astype(np.int32)), ("valid_counts", counts.astype(np.int32))])


# ---------------------------------------------------------------- self checks


def self_check():
    """Documented constants of the formats; abort generation if any fails."""
    assert N.E4M3_TABLE[0x7E] == 448.0 and N.E4M3_TABLE[0x08] == 2.0**-6
    assert N.E4M3_TABLE[0x01] == 2.0**-9 and math.isnan(N.E4M3_TABLE[0x7F])
    assert math.copysign(1, N.E4M3_TABLE[0x80]) < 0 and N.E4M3_TABLE[0x80] == 0
    for b in range(256):
        v = N.E4M3_TABLE[b]
        if not math.isnan(v):
            assert N.e4m3_encode(v) == b, b
    cases = {448.0: 0x7E, 464.0: 0x7E, 464.5: 0x7F, 479.9: 0x7F, 480.0: 0x7F, -500.0: 0xFF,
             8.5: 0x50, 9.5: 0x52, 2.0**-10: 0x00, 3 * 2.0**-10: 0x02, -0.0: 0x80, -1e-9: 0x80}
    for x, want in cases.items():
        assert N.e4m3_encode(np.float32(x)) == want, (x, hex(N.e4m3_encode(x)))
    assert N.bf16_bits(1 + 2.0**-8) == 0x3F80 and N.bf16_bits(1 + 3 * 2.0**-8) == 0x3F82
    assert N.bf16_bits(3.4028234663852886e38) == 0x7F80 and N.bf16_bits(-0.0) == 0x8000
    assert N.pow2_scale(448.0) == 1.0 and N.pow2_scale(0.0) == 2.0**-13
    assert N.pow2_scale(float(np.nextafter(np.float32(448), np.float32(1e9)))) == 2.0
    rec = N.ds_mla_encode(np.linspace(-2, 2, 576).astype(np.float32))
    assert len(rec) == 656
    tmp = os.path.join(OUT_DIR, ".selfcheck.safetensors")
    st.write(tmp, [("a", np.arange(6, dtype=np.int32).reshape(2, 3))], {"k": "v"})
    t, m = st.read(tmp)
    os.remove(tmp)
    assert m == {"k": "v"} and t["a"][1].tolist() == [[0, 1, 2], [3, 4, 5]]


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    self_check()
    w = Writer()
    gen_prefill(w)
    gen_decode(w)
    gen_ds_mla(w)
    gen_indexer(w)
    gen_combine(w)
    gen_dcp(w)
    w.manifest()


if __name__ == "__main__":
    main()
