"""The math keys of a DeepSeek-V3.2 / GLM-5 config.json.

Keys a config omits take the published defaults of its model_type; keys
whose value this implementation does not compute are refused by name.
"""

import math
from dataclasses import dataclass, field


@dataclass
class YaRN:
    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float = 1.0
    mscale_all_dim: float = 0.0


@dataclass
class Config:
    model_type: str
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    q_lora_rank: int  # 0: plain q_proj
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_interleave: bool
    indexer_rope_interleave: bool
    index_n_heads: int  # 0: dense MLA, no indexer
    index_head_dim: int
    index_topk: int
    intermediate_size: int
    first_k_dense_replace: int
    moe_layer_freq: int
    n_routed_experts: int
    n_shared_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    n_group: int
    topk_group: int
    routed_scaling_factor: float
    norm_topk_prob: bool
    num_nextn_predict_layers: int
    tie_word_embeddings: bool
    yarn: YaRN = None
    raw: dict = field(default=None, repr=False)

    @staticmethod
    def from_hf(c):
        mt = c.get("model_type", "")
        if mt not in ("deepseek_v32", "glm_moe_dsa", "deepseek_v3"):
            raise ValueError(f"model_type {mt!r} is not deepseek_v32, glm_moe_dsa or deepseek_v3")
        for key, want in (("scoring_func", "sigmoid"), ("topk_method", "noaux_tc"), ("hidden_act", "silu")):
            if c.get(key, want) != want:
                raise ValueError(f"{key} {c[key]!r} is not implemented (only {want!r})")
        if c.get("attention_bias", False):
            raise ValueError("attention_bias true is not implemented")
        for key in ("index_topk_freq", "index_skip_topk_offset", "indexer_types", "index_topk_pattern"):
            if key in c:
                raise ValueError(f"{key} (shared indexer layers) is not implemented")
        rope = c.get("rope_scaling") or None
        params = c.get("rope_parameters") or {}
        theta = c.get("rope_theta", params.get("rope_theta", 10000.0))
        if rope is None and params.get("rope_type", "default") not in ("default",):
            rope = params
        yarn = None
        if rope is not None:
            kind = rope.get("type", rope.get("rope_type"))
            if kind != "yarn":
                raise ValueError(f"rope scaling {kind!r} is not implemented (only yarn)")
            yarn = YaRN(factor=float(rope["factor"]),
                        original_max_position_embeddings=int(rope["original_max_position_embeddings"]),
                        beta_fast=float(rope.get("beta_fast", 32)), beta_slow=float(rope.get("beta_slow", 1)),
                        mscale=float(rope.get("mscale", 1)), mscale_all_dim=float(rope.get("mscale_all_dim", 0)))
        glm = mt == "glm_moe_dsa"
        layers = c["num_hidden_layers"]
        return Config(
            model_type=mt,
            vocab_size=c["vocab_size"],
            hidden_size=c["hidden_size"],
            num_hidden_layers=layers,
            num_attention_heads=c["num_attention_heads"],
            q_lora_rank=c.get("q_lora_rank") or 0,
            kv_lora_rank=c["kv_lora_rank"],
            qk_nope_head_dim=c["qk_nope_head_dim"],
            qk_rope_head_dim=c["qk_rope_head_dim"],
            v_head_dim=c["v_head_dim"],
            rms_norm_eps=c.get("rms_norm_eps", 1e-5 if glm else 1e-6),
            rope_theta=float(theta),
            rope_interleave=c.get("rope_interleave", True),
            indexer_rope_interleave=c.get("indexer_rope_interleave", False),
            index_n_heads=c.get("index_n_heads", 0) if mt != "deepseek_v3" else 0,
            index_head_dim=c.get("index_head_dim", 0) if mt != "deepseek_v3" else 0,
            index_topk=c.get("index_topk", 0) if mt != "deepseek_v3" else 0,
            intermediate_size=c["intermediate_size"],
            first_k_dense_replace=c.get("first_k_dense_replace", 0),
            moe_layer_freq=c.get("moe_layer_freq", 1),
            n_routed_experts=c.get("n_routed_experts") or 0,
            n_shared_experts=c.get("n_shared_experts") or 0,
            num_experts_per_tok=c.get("num_experts_per_tok") or 0,
            moe_intermediate_size=c.get("moe_intermediate_size") or 0,
            n_group=c.get("n_group") or 1,
            topk_group=c.get("topk_group") or 1,
            routed_scaling_factor=float(c.get("routed_scaling_factor", 1.0)),
            norm_topk_prob=c.get("norm_topk_prob", True),
            num_nextn_predict_layers=c.get("num_nextn_predict_layers", 0),
            tie_word_embeddings=c.get("tie_word_embeddings", False),
            yarn=yarn,
            raw=c,
        )

    @property
    def sparse(self):
        return self.index_n_heads > 0

    def routed(self, i):
        """Whether layer i (the MTP layers included) is a MoE layer."""
        return self.n_routed_experts > 0 and i >= self.first_k_dense_replace and i % self.moe_layer_freq == 0

    def mtp_own_head(self):
        """DeepSeek-V3.2 stores shared_head.head in its MTP layer; GLM-5 uses the main lm_head."""
        return self.model_type != "glm_moe_dsa"

    def softmax_scale(self):
        s = (self.qk_nope_head_dim + self.qk_rope_head_dim) ** -0.5
        if self.yarn is not None and self.yarn.mscale_all_dim:
            m = yarn_mscale(self.yarn.factor, self.yarn.mscale_all_dim)
            s *= m * m
        return s


def yarn_mscale(factor, m):
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0
