"""Reference math of the conformance kernels, in float64, written from the
formulas of the project's sparse-MLA spec (FlashMLA sparse prefill/decode
semantics, the DSA indexer, the DCP LSE combine and the DCP ownership
function).  Loops are plain and explicit: clarity over speed.
"""

import math

import numpy as np

from numerics import ds_mla_decode, RECORD_BYTES

D_QK = 576
D_V = 512


def _logsumexp(p):
    m = max(p)
    if m == -math.inf:
        return -math.inf
    return m + math.log(sum(math.exp(x - m) for x in p))


def sparse_prefill(q, kv, indices, sm_scale, d_v, topk_length=None):
    """q [s_q,h_q,d_qk], kv [s_kv,d_qk], indices [s_q,topk] -> out
    [s_q,h_q,d_v], lse [s_q,h_q] (+inf for rows without a valid key),
    max_logits [s_q,h_q] (-inf for rows without a valid key)."""
    s_q, h_q, _ = q.shape
    s_kv = kv.shape[0]
    topk = indices.shape[1]
    q64 = q.astype(np.float64)
    kv64 = kv.astype(np.float64)
    out = np.zeros((s_q, h_q, d_v))
    lse = np.zeros((s_q, h_q))
    max_logits = np.zeros((s_q, h_q))
    for i in range(s_q):
        limit = topk if topk_length is None else int(topk_length[i])
        rows = [int(x) for x in indices[i, :limit] if 0 <= int(x) < s_kv]
        keys = kv64[rows]  # [n, d_qk]
        for h in range(h_q):
            p = [sm_scale * float(np.dot(q64[i, h], k)) for k in keys]
            if not p:
                lse[i, h] = math.inf
                max_logits[i, h] = -math.inf
                continue
            l = _logsumexp(p)
            lse[i, h] = l
            max_logits[i, h] = max(p)
            w = np.array([math.exp(x - l) for x in p])
            out[i, h] = w @ keys[:, :d_v]
    return out, lse, max_logits


def dequantize_cache(cache):
    """[num_blocks, page, 656] u8 -> [num_blocks*page, 576] float64."""
    recs = cache.reshape(-1, RECORD_BYTES)
    return np.stack([ds_mla_decode(r.tobytes()) for r in recs])


def sparse_decode(q, cache, indices, sm_scale, topk_length=None):
    """q [b,s_q,h_q,576], cache [blocks,page,656] u8, indices [b,s_q,topk]
    slots (-1 invalid) -> out [b,s_q,h_q,512], lse [b,s_q,h_q] (+inf for
    rows without a valid key).  Only referenced cache rows are decoded."""
    b, s_q, h_q, _ = q.shape
    topk = indices.shape[2]
    recs = cache.reshape(-1, RECORD_BYTES)
    out = np.zeros((b, s_q, h_q, D_V))
    lse = np.zeros((b, s_q, h_q))
    q64 = q.astype(np.float64)
    for bi in range(b):
        limit = topk if topk_length is None else int(topk_length[bi])
        for i in range(s_q):
            slots = [int(x) for x in indices[bi, i, :limit] if int(x) != -1]
            keys = np.array([ds_mla_decode(recs[s].tobytes()) for s in slots]).reshape(-1, D_QK)
            for h in range(h_q):
                p = [sm_scale * float(np.dot(q64[bi, i, h], k)) for k in keys]
                if not p:
                    lse[bi, i, h] = math.inf
                    continue
                l = _logsumexp(p)
                lse[bi, i, h] = l
                w = np.array([math.exp(x - l) for x in p])
                out[bi, i, h] = w @ keys[:, :D_V]
    return out, lse


def indexer_scores(q, k, w, ends):
    """I[t,s] = sum_h w[t,h] * relu(q[t,h].k[s]) for s < ends[t], -inf after."""
    t_n, h_n, _ = q.shape
    s_n = k.shape[0]
    q64, k64, w64 = q.astype(np.float64), k.astype(np.float64), w.astype(np.float64)
    scores = np.full((t_n, s_n), -math.inf)
    for t in range(t_n):
        for s in range(int(ends[t])):
            dots = q64[t] @ k64[s]  # [H]
            scores[t, s] = float(np.sum(w64[t] * np.maximum(dots, 0.0)))
    return scores


def indexer_topk(scores, ends, topk):
    """Indices [t,topk]: the min(topk, ends[t]) best keys of each row,
    score descending then lowest index, -1 padding at the end."""
    t_n = scores.shape[0]
    idx = np.full((t_n, topk), -1, dtype=np.int32)
    for t in range(t_n):
        order = sorted(range(int(ends[t])), key=lambda s: (-scores[t, s], s))
        sel = order[:topk]
        idx[t, : len(sel)] = sel
    return idx


def topk_ties(scores, ends, indices, tau):
    """u8 [t,topk]: 1 where a different valid key scores within tau(score)
    of the selected key without being exactly equal, i.e. where float32
    rounding may legitimately substitute or reorder keys.  Exact equalities
    are not marked: they are resolved by the lowest-index rule."""
    t_n, topk = indices.shape
    ties = np.zeros((t_n, topk), dtype=np.uint8)
    for t in range(t_n):
        valid = [scores[t, s] for s in range(int(ends[t]))]
        for p in range(topk):
            s = int(indices[t, p])
            if s < 0:
                continue
            ref = scores[t, s]
            for o, v in enumerate(valid):
                if o != s and v != ref and abs(v - ref) <= tau(ref):
                    ties[t, p] = 1
                    break
    return ties


def lse_combine(out, lse):
    """out [n,t,h,d], lse [n,t,h] -> out [t,h,d], lse [t,h].

    NaN and +inf partial LSEs mean an empty rank and count as -inf; an
    empty rank's partial output is never read.  Rows where every rank is
    empty give out 0 and lse -inf."""
    n, t_n, h_n, d = out.shape
    res = np.zeros((t_n, h_n, d))
    res_lse = np.zeros((t_n, h_n))
    for t in range(t_n):
        for h in range(h_n):
            ls = []
            for r in range(n):
                v = float(lse[r, t, h])
                ls.append(-math.inf if (math.isnan(v) or v == math.inf) else v)
            m = max(ls)
            if m == -math.inf:
                res_lse[t, h] = -math.inf
                continue
            total = m + math.log(sum(math.exp(v - m) for v in ls))
            res_lse[t, h] = total
            acc = np.zeros(d)
            for r in range(n):
                if ls[r] == -math.inf:
                    continue
                acc += math.exp(ls[r] - total) * out[r, t, h].astype(np.float64)
            res[t, h] = acc
    return res, res_lse


def owner(p, n, i):
    return (p // i) % n


def local_index(p, n, i):
    return (p // (n * i)) * i + p % i


def dcp_local_seq_len(s, n, r, i):
    """Number of positions p < s with owner(p) == r (closed form)."""
    full = s // (n * i)
    rem = s - full * n * i
    return full * i + min(max(rem - r * i, 0), i)


def dcp_local_seq_len_count(s, n, r, i):
    """The same number by counting; used to check the closed form."""
    return sum(1 for p in range(s) if owner(p, n, i) == r)


def dcp_localize(indices, block_table, req_id, block_size, n, r, i, compact):
    """indices [T,K] request positions (-1 invalid) -> slots [T,K],
    valid_counts [T].  A position is kept when this rank owns it and its
    local block lies inside the request's block table row and is allocated
    (a negative block id is an unallocated block); compact mode
    moves the kept slots to the front in their original order."""
    t_n, k_n = indices.shape
    max_blocks = block_table.shape[1]
    slots = np.full((t_n, k_n), -1, dtype=np.int32)
    counts = np.zeros(t_n, dtype=np.int32)
    for t in range(t_n):
        row = block_table[int(req_id[t])]
        kept = []
        for k in range(k_n):
            g = int(indices[t, k])
            slot = -1
            if g >= 0 and owner(g, n, i) == r:
                loc = local_index(g, n, i)
                blk, off = loc // block_size, loc % block_size
                if blk < max_blocks and int(row[blk]) >= 0:
                    slot = int(row[blk]) * block_size + off
            kept.append(slot)
        valid = [s for s in kept if s != -1]
        counts[t] = len(valid)
        if compact:
            slots[t, : len(valid)] = valid
        else:
            slots[t] = kept
    return slots, counts
