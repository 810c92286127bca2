"""DeepSeek-V3.2 / GLM-5 (sparse MLA + DSA lightning indexer + noaux_tc MoE + MTP) in PyTorch.

Written from the published model definitions (the DeepSeek-V3 and
DeepSeek-V3.2 papers and reference inference code, the transformers and vLLM
model files for deepseek_v3 / deepseek_v32 / glm_moe_dsa), for whole
sequences without a KV cache: the form training uses. Module and parameter
names are the checkpoint's, so `state_dict()` keys are the HF tensor names.

Math, per decoder layer (x: [T, D] residual stream, positions 0..T-1):

  a = input_layernorm(h)                                   RMSNorm
  cQ = q_a_layernorm(q_a_proj(a));  q = q_b_proj(cQ) -> [T, H, d_nope + d_rope]
  kv = kv_a_proj_with_mqa(a) -> c = kv_a_layernorm(kv[:, :kv_lora]), k_pe = kv[:, kv_lora:]
  q_pe, k_pe rotated (RoPE, interleaved pairs; YaRN frequencies when configured)
  [k_nope | v] = kv_b_proj(c) per head                     (MHA form of MLA)
  logit[h,t,s] = scale * (q_nope[t,h].k_nope[s,h] + q_pe[t,h].k_pe[s])
  scale = (d_nope + d_rope)^-0.5 * mscale(factor, mscale_all_dim)^2
  attended keys of row t: the indexer's top-k of s <= t (all s <= t without an indexer)
  h += o_proj(softmax(logit) @ v)
  h += mlp(post_attention_layernorm(h))                   SwiGLU, or the MoE block

DSA lightning indexer (one key per token, shared by all query heads):
  qI = wq_b(cQ) -> [T, H_I, d_I], kI = k_norm(wk(a))      (k_norm: LayerNorm with bias, eps 1e-6)
  RoPE on dims [0, d_rope) of qI and kI (interleaved for GLM-5, half-split for V3.2)
  w = weights_proj(a) * H_I^-0.5
  I[t,s] = sum_h w[t,h] * ReLU(qI[t,h].kI[s]) * d_I^-0.5,  s <= t
  selection: the min(index_topk, t+1) best s, score descending, ties to the lowest s

MoE (noaux_tc, DeepSeek-V3): s = sigmoid(a Wg^T); select on s + e_score_correction_bias;
  with n_group > 1 a group scores the sum of its two best, the topk_group best groups
  stay and the other groups' experts are excluded; top num_experts_per_tok experts (ties
  to the lowest index); weights = the unbiased s of those, / their sum when norm_topk_prob,
  * routed_scaling_factor; output = sum_k w_k expert_k(a) + shared_experts(a).

MTP layer (model.layers.{num_hidden_layers}): for row i at position p with token t
  (the token after p) and previous hidden hp:
  e = embed_tokens(t), zero at p == 0;  x = eh_proj([enorm(e) | hnorm(hp)])
  x = decoder layer(x);  out = shared_head.norm(x);  logits = head(out)
  head = shared_head.head when stored (DeepSeek-V3.2), else the main lm_head (GLM-5).
  The embedding is the main model's (the DeepSeek-V3 report: shared with the main model).
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from hfconfig import Config, yarn_mscale


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def inv_freq(cfg: Config):
    """RoPE inverse frequencies of the d_rope dims, with YaRN's ramp when configured."""
    d = cfg.qk_rope_head_dim
    base = torch.tensor(cfg.rope_theta, dtype=torch.float64)
    f = 1.0 / base ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    y = cfg.yarn
    if y is None:
        return f, 1.0

    def corr(n):
        return d * math.log(y.original_max_position_embeddings / (n * 2 * math.pi)) / (2 * math.log(cfg.rope_theta))

    low = max(math.floor(corr(y.beta_fast)), 0)
    high = min(math.ceil(corr(y.beta_slow)), d - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(d // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    f = f / y.factor * ramp + f * (1 - ramp)
    # cos/sin scale; mscale(f, 0) = 1 when mscale_all_dim is absent.
    return f, yarn_mscale(y.factor, y.mscale) / yarn_mscale(y.factor, y.mscale_all_dim)


def rope(x, cos, sin, interleaved):
    """Rotate the last dim of x ([B, T, d] or [B, T, H, d]) by angles whose cos/sin are [T, d/2]."""
    shape = [1, x.shape[1]] + [1] * (x.dim() - 3) + [cos.shape[-1]]
    c, s = cos.reshape(shape), sin.reshape(shape)
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
        ra, rb = a * c - b * s, a * s + b * c
        return torch.stack((ra, rb), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat((a * c - b * s, a * s + b * c), dim=-1)


def select_topk(scores, k):
    """Indices of the k best entries of each row: score descending, ties to the lowest index."""
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    return order[..., :k]


class Indexer(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        hi, di = cfg.index_n_heads, cfg.index_head_dim
        self.wq_b = nn.Linear(cfg.q_lora_rank, hi * di, bias=False)
        self.wk = nn.Linear(cfg.hidden_size, di, bias=False)
        self.k_norm = nn.LayerNorm(di, eps=1e-6)
        self.weights_proj = nn.Linear(cfg.hidden_size, hi, bias=False)

    def scores(self, a, cq, cos, sin):
        """Index scores [B, T, T] (−inf above the diagonal)."""
        cfg = self.cfg
        B, T, hi, di, dr = a.shape[0], a.shape[1], cfg.index_n_heads, cfg.index_head_dim, cfg.qk_rope_head_dim
        q = self.wq_b(cq).view(B, T, hi, di)
        k = self.k_norm(self.wk(a))
        q = torch.cat((rope(q[..., :dr], cos, sin, cfg.indexer_rope_interleave), q[..., dr:]), dim=-1)
        k = torch.cat((rope(k[..., :dr], cos, sin, cfg.indexer_rope_interleave), k[..., dr:]), dim=-1)
        w = self.weights_proj(a) * hi ** -0.5                       # [B, T, H_I]
        dots = torch.einsum("bthd,bsd->bths", q, k) * di ** -0.5    # [B, T, H_I, S]
        idx = torch.einsum("bth,bths->bts", w, F.relu(dots))
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        return idx.masked_fill(~causal, float("-inf"))


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        H, dn, dr, dv, dc = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
        if cfg.q_lora_rank:
            self.q_a_proj = nn.Linear(cfg.hidden_size, cfg.q_lora_rank, bias=False)
            self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
            self.q_b_proj = nn.Linear(cfg.q_lora_rank, H * (dn + dr), bias=False)
        else:
            if cfg.sparse:
                raise ValueError("the DSA indexer reads the q LoRA latent; q_lora_rank is required")
            self.q_proj = nn.Linear(cfg.hidden_size, H * (dn + dr), bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(cfg.hidden_size, dc + dr, bias=False)
        self.kv_a_layernorm = RMSNorm(dc, cfg.rms_norm_eps)
        self.kv_b_proj = nn.Linear(dc, H * (dn + dv), bias=False)
        self.o_proj = nn.Linear(H * dv, cfg.hidden_size, bias=False)
        if cfg.sparse:
            self.indexer = Indexer(cfg)
        # Training switches (train.py): dense_attention attends to every earlier key
        # whatever the indexer selects (the indexer's warm-up stage); with
        # indexer_loss set, forward stores in index_kl the per-row KL divergence of the
        # indexer's distribution from the heads' summed attention, over the attended
        # keys, on inputs detached from the rest of the model (DeepSeek-V3.2); with
        # indexer_dense_target also set, the KL is taken over every earlier key against
        # the attention the heads would give with no selection (computed without
        # gradients), while the heads still attend sparsely: a sparse stage's KL over
        # the selected keys cannot teach the indexer to pick a key it misses. With
        # indexer_target_topk also set, that target keeps only each row's index_topk
        # keys of most summed attention (renormalised): over thousands of keys the
        # heads' dense attention spreads mass the selection cannot follow, and what
        # the indexer has to get right is which keys rank first.
        self.dense_attention = False
        self.indexer_loss = False
        self.indexer_dense_target = False
        self.indexer_target_topk = False
        self.index_kl = None

    def forward(self, a, cos, sin, trace=None):
        """a: [B, T, D] normed input. trace (B = 1), when a dict, receives 'selected' ([T]
        lists of attended positions) and 'margin' (per row with more than index_topk keys:
        the k-th minus the (k+1)-th index score, and the k-th score)."""
        cfg = self.cfg
        B, T = a.shape[0], a.shape[1]
        H, dn, dr, dv, dc = cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.kv_lora_rank
        if cfg.q_lora_rank:
            cq = self.q_a_layernorm(self.q_a_proj(a))
            q = self.q_b_proj(cq)
        else:
            cq, q = None, self.q_proj(a)
        q = q.view(B, T, H, dn + dr)
        q_nope, q_pe = q[..., :dn], rope(q[..., dn:], cos, sin, cfg.rope_interleave)
        kv = self.kv_a_proj_with_mqa(a)
        c = self.kv_a_layernorm(kv[..., :dc])
        k_pe = rope(kv[..., dc:], cos, sin, cfg.rope_interleave)  # [B, T, d_rope], one per token
        ukv = self.kv_b_proj(c).view(B, T, H, dn + dv)
        k_nope, v = ukv[..., :dn], ukv[..., dn:]
        logit = torch.einsum("bthd,bshd->bhts", q_nope, k_nope) + torch.einsum("bthd,bsd->bhts", q_pe, k_pe)
        logit = logit * cfg.softmax_scale()
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        allowed = causal.expand(B, T, T)
        if cfg.sparse:
            if self.indexer_loss:
                scores = self.indexer.scores(a.detach(), cq.detach(), cos, sin)
            else:
                scores = self.indexer.scores(a, cq, cos, sin)
            K = cfg.index_topk
            if not self.dense_attention or trace is not None:
                picked = select_topk(scores, min(K, T))
                # The k best of row t are its min(k, t+1) keys at or before t: scores after
                # t are -inf and sort last, and the causal mask drops the ones picked past t.
                sel = torch.zeros(B, T, T, dtype=torch.bool).scatter_(-1, picked, True) & causal
            if not self.dense_attention:
                allowed = sel
            if trace is not None:
                srt = torch.sort(scores[0], dim=-1, descending=True, stable=True).values
                trace["selected"] = [sorted(picked[0, t, :min(K, t + 1)].tolist()) for t in range(T)]
                trace["margin"] = {t: (float(srt[t, K - 1] - srt[t, K]), float(srt[t, K - 1])) for t in range(T) if t + 1 > K}
        elif trace is not None:
            trace["selected"] = [list(range(t + 1)) for t in range(T)]
            trace["margin"] = {}
        dense_target = cfg.sparse and self.indexer_loss and self.indexer_dense_target
        full_logit = logit.detach() if dense_target and not self.dense_attention else None
        logit = logit.masked_fill(~allowed.unsqueeze(1), float("-inf"))
        p = torch.softmax(logit, dim=-1)
        if cfg.sparse and self.indexer_loss:
            over = causal.expand(B, T, T) if dense_target else allowed
            with torch.no_grad():
                pt = p if full_logit is None else torch.softmax(full_logit.masked_fill(~causal, float("-inf")), dim=-1)
                target = pt.sum(1).masked_fill(~over, 0.0)
                if dense_target and self.indexer_target_topk and T > cfg.index_topk:
                    keep = torch.topk(target, cfg.index_topk, dim=-1).indices
                    target = torch.zeros_like(target).scatter_(-1, keep, target.gather(-1, keep))
                target = target / target.sum(-1, keepdim=True)
            logq = torch.log_softmax(scores.masked_fill(~over, float("-inf")), dim=-1)
            term = torch.where(target > 0, target * (torch.log(target.clamp_min(1e-30)) - logq), torch.zeros_like(logq))
            self.index_kl = term.sum(-1)                              # [B, T]
        o = torch.einsum("bhts,bshd->bthd", p, v).reshape(B, T, H * dv)
        return self.o_proj(o)


class MLP(nn.Module):
    def __init__(self, d, w):
        super().__init__()
        self.gate_proj = nn.Linear(d, w, bias=False)
        self.up_proj = nn.Linear(d, w, bias=False)
        self.down_proj = nn.Linear(w, d, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Router(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.weight = nn.Parameter(torch.zeros(cfg.n_routed_experts, cfg.hidden_size))
        self.e_score_correction_bias = nn.Parameter(torch.zeros(cfg.n_routed_experts))

    def forward(self, a):
        """Experts [N, K] and their weights [N, K] of rows a [N, D]; also the selection
        margin per row."""
        cfg = self.cfg
        T, E, K = a.shape[0], cfg.n_routed_experts, cfg.num_experts_per_tok
        s = torch.sigmoid(a @ self.weight.t())
        sel = s + self.e_score_correction_bias
        group_margin = torch.full((T,), float("inf"))
        if cfg.n_group > 1:
            G = cfg.n_group
            g = sel.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)   # [T, G]
            order = torch.sort(g, dim=-1, descending=True, stable=True)
            keep = order.indices[:, :cfg.topk_group]
            group_margin = order.values[:, cfg.topk_group - 1] - order.values[:, cfg.topk_group]
            mask = torch.ones(T, G, dtype=torch.bool)
            mask.scatter_(1, keep, False)
            sel = sel.masked_fill(mask.repeat_interleave(E // G, dim=1), float("-inf"))
        order = torch.sort(sel, dim=-1, descending=True, stable=True)
        idx = order.indices[:, :K]
        margin = torch.minimum(order.values[:, K - 1] - order.values[:, K], group_margin)
        w = s.gather(1, idx)
        if cfg.norm_topk_prob:
            w = w / w.sum(-1, keepdim=True)
        return idx, w * cfg.routed_scaling_factor, margin


class MoE(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.gate = Router(cfg)
        self.experts = nn.ModuleList(MLP(cfg.hidden_size, cfg.moe_intermediate_size) for _ in range(cfg.n_routed_experts))
        if cfg.n_shared_experts:
            self.shared_experts = MLP(cfg.hidden_size, cfg.n_shared_experts * cfg.moe_intermediate_size)

    def forward(self, a, trace=None):
        shape = a.shape
        a = a.reshape(-1, shape[-1])
        idx, w, margin = self.gate(a)
        self.last_experts = idx.detach()
        y = torch.zeros_like(a)
        for e in torch.unique(idx).tolist():
            rows, slot = (idx == e).nonzero(as_tuple=True)
            y = y.index_add(0, rows, w[rows, slot].unsqueeze(-1) * self.experts[e](a[rows]))
        if self.cfg.n_shared_experts:
            y = y + self.shared_experts(a)
        if trace is not None:
            trace["experts"] = [sorted(r) for r in idx.tolist()]
            trace["route_margin"] = margin.tolist()
        return y.reshape(shape)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: Config, i):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.routed = cfg.routed(i)
        self.mlp = MoE(cfg) if self.routed else MLP(cfg.hidden_size, cfg.intermediate_size)

    def forward(self, h, cos, sin, trace=None):
        h = h + self.self_attn(self.input_layernorm(h), cos, sin, trace)
        a = self.post_attention_layernorm(h)
        return h + (self.mlp(a, trace) if self.routed else self.mlp(a))


class SharedHead(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if cfg.mtp_own_head():
            self.head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)


class MTPLayer(DecoderLayer):
    """A full decoder layer plus the MTP glue, under the same prefix."""

    def __init__(self, cfg: Config, i):
        super().__init__(cfg, i)
        D = cfg.hidden_size
        self.enorm = RMSNorm(D, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(D, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * D, D, bias=False)
        self.shared_head = SharedHead(cfg)
        if cfg.mtp_own_head():
            # The checkpoint's copy of the embedding; the layer reads the main one.
            self.embed_tokens = nn.Embedding(cfg.vocab_size, D)


class Inner(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        L = cfg.num_hidden_layers
        layers = [DecoderLayer(cfg, i) for i in range(L)]
        layers += [MTPLayer(cfg, L + k) for k in range(cfg.num_nextn_predict_layers)]
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Model(nn.Module):
    """The causal LM and its MTP layers; parameter names are the HF tensor names."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.model = Inner(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.freq, self.attn_factor = inv_freq(cfg)

    def head(self):
        return self.model.embed_tokens.weight if self.cfg.tie_word_embeddings else self.lm_head.weight

    def rope_tables(self, positions):
        """cos and sin [T, d_rope/2], computed in float64, in the model's dtype."""
        ang = positions.to(torch.float64).unsqueeze(-1) * self.freq
        dt = self.model.embed_tokens.weight.dtype
        return (ang.cos() * self.attn_factor).to(dt), (ang.sin() * self.attn_factor).to(dt)

    def forward(self, tokens, traces=None):
        """tokens: [T] or [B, T] at positions 0..T-1. Returns (logits [(B,) T, V], hidden
        [(B,) T, D] after the final norm). traces (one sequence only), when a list, gets
        one dict per decoder layer."""
        if tokens.dim() == 1:
            logits, hn = self.forward(tokens.unsqueeze(0), traces)
            return logits[0], hn[0]
        T = tokens.shape[1]
        cos, sin = self.rope_tables(torch.arange(T))
        h = self.model.embed_tokens(tokens)
        for i in range(self.cfg.num_hidden_layers):
            tr = {} if traces is not None else None
            h = self.model.layers[i](h, cos, sin, tr)
            if traces is not None:
                traces.append(tr)
        hn = self.model.norm(h)
        return hn @ self.head().t(), hn

    def mtp(self, k, tokens, prev_hidden, trace=None):
        """MTP layer k over rows at positions 0..T-1: tokens[i] is the token after position i,
        prev_hidden[i] the hidden state it continues (tokens [T] or [B, T], prev_hidden
        [(B,) T, D]). Returns (logits, shared_head.norm output)."""
        if tokens.dim() == 1:
            logits, out = self.mtp(k, tokens.unsqueeze(0), prev_hidden.unsqueeze(0), trace)
            return logits[0], out[0]
        cfg = self.cfg
        layer = self.model.layers[cfg.num_hidden_layers + k]
        T = tokens.shape[1]
        pos = torch.arange(T)
        cos, sin = self.rope_tables(pos)
        e = self.model.embed_tokens(tokens)
        e = e.masked_fill((pos == 0).view(1, T, 1), 0.0)
        x = layer.eh_proj(torch.cat((layer.enorm(e), layer.hnorm(prev_hidden)), dim=-1))
        x = DecoderLayer.forward(layer, x, cos, sin, trace)
        out = layer.shared_head.norm(x)
        head = layer.shared_head.head.weight if cfg.mtp_own_head() else self.head()
        return out @ head.t(), out


def load(ckpt, dtype=torch.float64):
    """A Model of the checkpoint's config with its weights (fp8 dequantized), in dtype.
    Every checkpoint tensor must be a parameter and every parameter a tensor."""
    cfg = Config.from_hf(ckpt.config)
    with torch.no_grad():
        m = Model(cfg).to(dtype)
        params = dict(m.named_parameters())
        names = [n for n in ckpt.names() if not n.endswith("_scale_inv")]
        missing = sorted(set(params) - set(names))
        extra = sorted(set(names) - set(params))
        if missing or extra:
            raise ValueError(f"checkpoint and model disagree: missing {missing[:5]}, unexpected {extra[:5]}")
        for n in names:
            v = torch.from_numpy(ckpt.tensor(n)).to(dtype)
            if tuple(v.shape) != tuple(params[n].shape):
                raise ValueError(f"{n}: checkpoint shape {tuple(v.shape)}, model {tuple(params[n].shape)}")
            params[n].copy_(v)
    return m
