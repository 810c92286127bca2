"""Write the PyTorch reference for cpmla checkpoints (model/testdata/torchref/).

For each case (preset, weight dtype, seed) it runs `cpmla model init`, loads the
checkpoint into model.Model in float64, and records for fixed prompts:

  - per position: the top entries of log p(next token | prefix) and the
    log-probabilities of the prompt's next token and of fixed token ids;
  - per layer and position: the indexer's selection (rows with more keys than
    index_topk), the gap between the k-th and (k+1)-th index score, the routed
    experts and the routing gap;
  - the MTP layer over the longest prompt the way speculative decoding runs it:
    teacher-forced rows 0..P-2 (token after p, target hidden after the final
    norm), the first draft at P-1 (the target's argmax), then chained steps that
    each take the previous step's argmax and its hidden after shared_head.norm.

Run from the repository root with Debian's python3 (python3-torch):
    go build -o /tmp/cpmla ./cmd/cpmla
    /usr/bin/python3 tools/train/reference.py --cpmla /tmp/cpmla
"""

import argparse
import gzip
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile

import numpy
import torch

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checkpoint import Checkpoint  # noqa: E402
import model as tm  # noqa: E402

FORMAT = 1
TOP = 5
MTP_STEPS = 3  # draft tokens per chain (num_speculative_tokens)
TIE_REL = 1e-5  # a decision this close to a tie could go either way in float32 (model/torchref_test.go)
CASES = [
    ("glm5-moe-mini", "bf16", 7),
    ("glm5-moe-mini", "fp8", 7),
    ("v32-moe-mini", "bf16", 7),
    ("v32-moe-mini", "fp8", 7),
    ("glm5-mini", "bf16", 7),
]


def prompts(vocab):
    """Three prompts: 3 and 11 tokens, and 40 (longer than the minis' index_topk 16)."""
    return [
        [(i * 7919 + 101) % vocab for i in range(40)],
        [(i * 104729 + 7) % vocab for i in range(11)],
        [(i * 31337 + 4242) % vocab for i in range(3)],
    ]


def rows(logits, nxt, fixed):
    """Per row: top TOP (id, logprob), logprob of the next token (or None), of the fixed ids."""
    lp = torch.log_softmax(logits, dim=-1)
    top = torch.sort(lp, dim=-1, descending=True, stable=True)
    out = []
    for t in range(lp.shape[0]):
        out.append({
            "top": [[int(top.indices[t, j]), round(float(top.values[t, j]), 10)] for j in range(TOP)],
            "next": None if nxt[t] is None else round(float(lp[t, nxt[t]]), 10),
            "fixed": [round(float(lp[t, i]), 10) for i in fixed],
        })
    return out


def layer_record(tr, K):
    rec = {"selected": [s if len(s) == K and (t + 1) > K else None for t, s in enumerate(tr["selected"])],
           "index_margin": [None] * len(tr["selected"])}
    for t, (gap, kth) in tr["margin"].items():
        rec["index_margin"][t] = [gap, kth]
    if "experts" in tr:
        rec["experts"] = tr["experts"]
        rec["route_margin"] = tr["route_margin"]
    return rec


def near_ties(rec, rel):
    """Rows whose index or routing decision was within rel of a tie. Exact ties
    among exact zeros (every indexer head's dot product negative) are not: any
    implementation computes exactly 0 there and takes the lowest position."""
    out = []
    for t, m in enumerate(rec["index_margin"]):
        if m is not None and not (m[0] == 0 and m[1] == 0) and m[0] <= rel * max(abs(m[1]), 1e-30):
            out.append(("index", t, m))
    for t, g in enumerate(rec.get("route_margin", [])):
        if g <= rel:
            out.append(("route", t, g))
    return out


def task_prompts(d):
    """Three prompts of the trained model's own tasks, in its own tokenizer: a passkey
    chat of about 300 tokens (well past index_topk 128, so the indexer selects), a
    held-out arithmetic question with its answer, and a copy request."""
    import random

    import bpe
    import tasks
    with open(os.path.join(d, "tokenizer.json")) as f:
        tj = json.load(f)
    tok = bpe.Tokenizer([tuple(m) for m in tj["model"]["merges"]])
    rng = random.Random(11)
    key = 40917
    hay = tasks.passkey_haystack(rng, 40, 0.3, key)
    h = tasks.heldout_arithmetic(1)[0]
    p, t = tasks.arithmetic_plain(h["question"], h["working"], h["answer"])
    texts = [f"{tasks.USER}{tasks.passkey_prompt(hay)}{tasks.ASSISTANT}{tasks.passkey_reply(key)}",
             p + t,
             f"{tasks.USER}Repeat exactly: ab cd{tasks.ASSISTANT}"]
    out = [tok.encode(x) for x in texts]
    for x, ids in zip(texts, out):
        if tok.decode(ids) != x:
            raise ValueError(f"the training encoder does not round-trip {x!r}")
    return out


def run_case(cpmla, work, preset, dtype, seed, checkpoint=None):
    """A case of a `cpmla model init` checkpoint, or (checkpoint set) of a committed one."""
    if checkpoint is None:
        d = os.path.join(work, f"{preset}-{dtype}-{seed}")
        subprocess.run([cpmla, "model", "init", "--preset", preset, "--seed", str(seed), "--weight-dtype", dtype, "--out", d],
                       check=True, stdout=subprocess.DEVNULL)
    else:
        d = checkpoint
    ck = Checkpoint(d)
    m = tm.load(ck)
    cfg = m.cfg
    V, K = cfg.vocab_size, max(cfg.index_topk, 1)
    fixed = [0, 1, V - 1]
    ps = prompts(V) if checkpoint is None else task_prompts(d)
    out = {
        "format": FORMAT,
        "preset": preset, "weight_dtype": dtype, "seed": seed,
        "generator": {"python": platform.python_version(), "torch": torch.__version__, "numpy": numpy.__version__,
                      "precision": "float64"},
        "checkpoint_sha256": ck.sha256(),
        "fixed_ids": fixed,
        "prompts": [],
    }
    ties = []
    with torch.no_grad():
        hidden_of = {}
        for pi, p in enumerate(ps):
            traces = []
            logits, hn = m(torch.tensor(p), traces)
            hidden_of[pi] = (logits, hn)
            rec = {"tokens": p, "rows": rows(logits, [p[t + 1] if t + 1 < len(p) else None for t in range(len(p))], fixed),
                   "layers": {str(i): layer_record(tr, K) for i, tr in enumerate(traces)}}
            for i, r in rec["layers"].items():
                ties += [(pi, int(i)) + x for x in near_ties(r, TIE_REL)]
            out["prompts"].append(rec)
        if cfg.num_nextn_predict_layers:
            p = ps[0]
            P = len(p)
            logits, hn = hidden_of[0]
            chain = [int(torch.argmax(logits[P - 1]))]
            toks = p[1:] + chain
            prev = hn
            while True:
                tr = {}
                lg, out_norm = m.mtp(0, torch.tensor(toks), prev, tr)
                if len(chain) == MTP_STEPS:
                    break
                chain.append(int(torch.argmax(lg[-1])))
                toks = toks + [chain[-1]]
                prev = torch.cat((prev, out_norm[-1:]), dim=0)
            nxt = [p[t + 2] if t + 2 < P else None for t in range(len(toks))]
            rec = {"prompt": 0, "layer": cfg.num_hidden_layers, "chain": chain,
                   "rows": rows(lg, nxt, fixed), "trace": layer_record(tr, K)}
            ties += [("mtp", cfg.num_hidden_layers) + x for x in near_ties(rec["trace"], TIE_REL)]
            out["mtp"] = rec
    out["near_ties"] = [list(map(str, t)) for t in ties]
    if checkpoint is None:
        shutil.rmtree(d)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpmla", required=True, help="the cpmla binary (go build -o /tmp/cpmla ./cmd/cpmla)")
    ap.add_argument("--out", default="model/testdata/torchref", help="directory of the reference files")
    ap.add_argument("--work", default=None, help="scratch directory for the checkpoints (default: a temporary one)")
    ap.add_argument("--case", action="append", help="preset/dtype/seed to write (default: all)")
    ap.add_argument("--checkpoint", action="append",
                    help="NAME=DIR: a committed checkpoint (the trained cpmla-tiny), with prompts of its own tasks; "
                         "replaces the default cases")
    ap.add_argument("--allow-near-ties", action="store_true",
                    help="write cases with decisions within TIE_REL of a tie (float32 may decide them otherwise)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cases = CASES if not args.checkpoint else []
    if args.case:
        cases = []
        for c in args.case:
            preset, dtype, seed = c.split("/")
            cases.append((preset, dtype, int(seed), None))
    cases = [c if len(c) == 4 else c + (None,) for c in cases]
    for c in args.checkpoint or []:
        name, d = c.split("=", 1)
        with open(os.path.join(d, "config.json")) as f:
            dtype = "fp8" if "quantization_config" in json.load(f) else "bf16"
        cases.append((name, dtype, 0, d))
    os.makedirs(args.out, exist_ok=True)
    work = args.work or tempfile.mkdtemp(prefix="torchref-")
    try:
        for preset, dtype, seed, ckpt in cases:
            rec = run_case(os.path.abspath(args.cpmla), work, preset, dtype, seed, ckpt)
            if ckpt is not None:
                rec["checkpoint"] = preset
            base = f"{preset}-{dtype}-seed{seed}" if ckpt is None else f"trained-{preset}"
            name = os.path.join(args.out, base + ".json.gz")
            data = json.dumps(rec, sort_keys=True, separators=(",", ":")).encode()
            with open(name, "wb") as f:
                with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as g:
                    g.write(data)
            print(f"{name}: {len(data)} bytes of JSON, near ties {rec['near_ties']}")
            if rec["near_ties"] and not args.allow_near_ties:
                sys.exit(f"{name} has near ties {rec['near_ties']}: pick another seed or prompt, or pass --allow-near-ties")
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
