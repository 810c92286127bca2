"""Write a trained Model as a checkpoint in the published layout.

bf16: every tensor BF16 (round to nearest even) except the router's
e_score_correction_bias, which stays F32 as in the published checkpoints.
fp8: the GLM-5-FP8 layout: every 2-D projection weight F8_E4M3 with an F32
weight_scale_inv per 128x128 block (partial blocks at the edges), the
quantization_config of the published config.json, and modules_to_not_convert
(embedding, lm_head, router, indexer weights_proj, eh_proj) kept BF16.
"""

import json
import os

import numpy
import torch

BLOCK = 128
E4M3_MAX = 448.0
NOT_CONVERTED = ["lm_head", "model.embed_tokens", "mlp.gate", "self_attn.indexers_proj", "eh_proj", "shared_head.head"]
ALIASES = {"self_attn.indexers_proj": "self_attn.indexer.weights_proj"}
QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                       "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": NOT_CONVERTED}


def e4m3_values():
    """The value of each code 0x00..0x7E (0x7F is NaN in e4m3fn)."""
    out = []
    for c in range(0x7F):
        e, m = c >> 3, c & 7
        out.append(m / 8 * 2.0 ** -6 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7))
    return numpy.array(out)


E4M3 = e4m3_values()


def to_e4m3(x):
    """Codes of float64 x (|x| <= 448), rounded to nearest, ties to the even code."""
    a = numpy.abs(x)
    hi = numpy.clip(numpy.searchsorted(E4M3, a), 1, len(E4M3) - 1)
    lo = hi - 1
    dlo, dhi = a - E4M3[lo], E4M3[hi] - a
    code = numpy.where(dhi < dlo, hi, lo)
    tie = dhi == dlo
    code = numpy.where(tie & (lo % 2 == 1), hi, code)
    code = numpy.where(a >= E4M3[-1], len(E4M3) - 1, code)
    return (code | numpy.where(numpy.signbit(x) & (code != 0), 0x80, 0)).astype(numpy.uint8)


def bf16_bits(t):
    u = t.detach().to(torch.float32).contiguous().numpy().view(numpy.uint32).astype(numpy.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    return r.astype(numpy.uint16)


def quantize(w):
    """(codes uint8 [R, C], scale_inv float32 [ceil(R/128), ceil(C/128)]) of a 2-D weight."""
    w = w.detach().to(torch.float64).numpy()
    R, C = w.shape
    br, bc = -(-R // BLOCK), -(-C // BLOCK)
    codes = numpy.zeros((R, C), numpy.uint8)
    scale = numpy.zeros((br, bc), numpy.float32)
    for i in range(br):
        for j in range(bc):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK]
            amax = float(numpy.abs(blk).max())
            s = numpy.float32(amax / E4M3_MAX) if amax > 0 else numpy.float32(1.0)
            scale[i, j] = s
            codes[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = to_e4m3(blk / float(s))
    return codes, scale


def converted(name, t):
    if t.dim() != 2 or not name.endswith(".weight"):
        return False
    mod = name[: -len(".weight")]
    # GLM-5-FP8 names the indexer's head weights self_attn.indexers_proj; its tensors
    # are self_attn.indexer.weights_proj.
    names = [ALIASES.get(n, n) for n in NOT_CONVERTED]
    return not any(mod == n or mod.endswith("." + n) for n in names)


def write_safetensors(path, tensors):
    """tensors: name -> (dtype string, shape, bytes)."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(tensors):
        dt, shape, data = tensors[name]
        header[name] = {"dtype": dt, "shape": list(shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for name in sorted(tensors):
            f.write(tensors[name][2])
    return offset


def export(model, config, directory, weight_dtype):
    os.makedirs(directory, exist_ok=True)
    tensors = {}
    for name, p in model.state_dict().items():
        if name.endswith("e_score_correction_bias"):
            tensors[name] = ("F32", p.shape, p.detach().to(torch.float32).numpy().tobytes())
        elif weight_dtype == "fp8" and converted(name, p):
            codes, scale = quantize(p)
            tensors[name] = ("F8_E4M3", p.shape, codes.tobytes())
            tensors[name + "_scale_inv"] = ("F32", scale.shape, scale.tobytes())
        else:
            tensors[name] = ("BF16", p.shape, bf16_bits(p).tobytes())
    shard = "model-00001-of-00001.safetensors"
    total = write_safetensors(os.path.join(directory, shard), tensors)
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": {n: shard for n in sorted(tensors)}}, f, indent=2)
        f.write("\n")
    cfg = dict(config)
    if weight_dtype == "fp8":
        cfg["quantization_config"] = QUANTIZATION_CONFIG
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
