"""Train cpmla-tiny from scratch on this machine's CPU and write its checkpoints.

    /usr/bin/python3 tools/train/train.py --out /tmp/cpmla-tiny-train

The run is fixed by its seed: the tokenizer's merges are fitted on a seeded
sample of the tasks, the model is initialised and the data drawn from seeded
generators, and torch runs deterministically on the CPU with a fixed thread
count. Stages, as DeepSeek-V3.2 trained its indexer, adapted to training from
scratch:

  1. dense   (steps [0, dense_steps)): attention over every earlier key; the
             model learns the tasks (next-token loss + 0.3 x the MTP layer's
             next-next-token loss) while the indexer, on inputs detached from
             the model, learns the heads' summed attention distribution (KL).
  2. sparse  (the rest): attention over the indexer's top-k only; the same
             losses, the indexer's KL now over the keys it selected.

The router's e_score_correction_bias is updated outside backpropagation after
every step, DeepSeek-V3's auxiliary-loss-free balancing: each expert's bias moves
by `bias_rate` towards the mean load.

Writes into --out: tokenizer.json, tokenizer_config.json, heldout.jsonl, the bf16
checkpoint (cpmla-tiny/) and the fp8 one (cpmla-tiny-fp8/), train.log, and
state.pt (the float32 weights and optimizer, for --resume).
"""

import argparse
import json
import math
import os
import random
import sys
import time

# Two settings of the process, not of the run (results do not depend on them),
# that make a training step on this 2-core machine about 1.5 times as fast:
#   - OpenBLAS's threads spin for a long time after every product, taking the
#     cores from torch's own threads for the element-wise work in between;
#     OPENBLAS_THREAD_TIMEOUT=4 (2^4 cycles) puts them to sleep at once.
#   - glibc's malloc returns large tensors to the kernel at every free, so every
#     activation of a step faults its pages in again; tcmalloc keeps them.
# Both must be in the environment before torch loads: the first is set here,
# the second by running the script again with tcmalloc preloaded (Debian's
# libtcmalloc-minimal4) when it is installed and not already loaded.
TCMALLOC = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4"
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")
if __name__ == "__main__" and "tcmalloc" not in os.environ.get("LD_PRELOAD", "") and os.path.exists(TCMALLOC):
    os.environ["LD_PRELOAD"] = (os.environ.get("LD_PRELOAD", "") + " " + TCMALLOC).strip()
    os.execv(sys.executable, [sys.executable] + sys.argv)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import export  # noqa: E402
import tasks  # noqa: E402
from hfconfig import Config  # noqa: E402
from checkpoint import Checkpoint  # noqa: E402
from model import Attention, Model, MoE  # noqa: E402
from model import load as load_checkpoint  # noqa: E402

N_MERGES = 252  # 256 bytes + 252 merges + 4 special tokens = 512 ids
HELDOUT = 500
CHECK_HAYSTACKS = (40, 120, 250, 500)  # filler sentences of the greedy check's pass keys
# Flags that only shape training; --eval-only refuses them rather than ignore them.
TRAINING_FLAGS = ("steps", "dense_fraction", "budget", "lr", "bias_rate", "eval_every", "save_every",
                  "mix", "stop_after", "passkey_min", "passkey_max", "working", "answer_weight", "init",
                  "indexer_dense_target", "indexer_target_topk", "indexer_answer_weight", "indexer_warmup")


def hf_config(tok, heads=2, index_topk=128, index_head_dim=64):
    """config.json of cpmla-tiny: a glm_moe_dsa model with GLM-5's attention shapes
    (kv_lora_rank 512 + qk_rope_head_dim 64: the 576/512 latent), the DSA indexer,
    one dense layer then MoE layers with noaux_tc routing, and one MTP layer; heads
    is the number of attention heads (2 in the first run, 4 in the committed one),
    index_topk the keys the indexer selects per query and index_head_dim its heads'
    dimensions, of which the first qk_rope_head_dim (64) are rotated."""
    return {
        "architectures": ["GlmMoeDsaForCausalLM"],
        "model_type": "glm_moe_dsa",
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": None,
        "eos_token_id": [tok.special[tasks.EOT], tok.special[tasks.USER]],
        "pad_token_id": tok.special[tasks.EOT],
        "first_k_dense_replace": 1,
        "head_dim": 32,
        "hidden_act": "silu",
        "hidden_size": 128,
        "index_head_dim": index_head_dim,
        "index_n_heads": 2,
        "index_topk": index_topk,
        "indexer_rope_interleave": True,
        "initializer_range": 0.02,
        "intermediate_size": 256,
        "kv_lora_rank": 512,
        "max_position_embeddings": 4096,
        "moe_intermediate_size": 128,
        "moe_layer_freq": 1,
        "n_group": 1,
        "n_routed_experts": 8,
        "n_shared_experts": 1,
        "norm_topk_prob": True,
        "num_attention_heads": heads,
        "num_experts_per_tok": 2,
        "num_hidden_layers": 3,
        "num_key_value_heads": heads,
        "num_nextn_predict_layers": 1,
        "q_lora_rank": 64,
        "qk_nope_head_dim": 32,
        "qk_rope_head_dim": 64,
        "rms_norm_eps": 1e-05,
        "rope_interleave": True,
        "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
        "routed_scaling_factor": 2.5,
        "scoring_func": "sigmoid",
        "tie_word_embeddings": False,
        "topk_group": 1,
        "topk_method": "noaux_tc",
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "v_head_dim": 32,
        "vocab_size": tok.size,
    }


def init_weights(m, std):
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("e_score_correction_bias"):
                p.zero_()
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) * std)
                if name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                    p.mul_(1 / math.sqrt(2 * 4))
            elif name.endswith(".bias"):
                p.zero_()
            else:
                p.fill_(1.0)


class Batches:
    """Seeded batches of whole documents (right-padded), one task per batch."""

    def __init__(self, seed, tok, heldout, budget, mix, passkey_max, working="plain", passkey_min=8, answer_weight=1.0):
        self.mix, self.passkey_min, self.passkey_max = mix, passkey_min, passkey_max
        self.answer_weight = answer_weight
        self.gen = tasks.Generator(seed, [h["key"] for h in heldout], working)
        self.rng = random.Random(seed + 1)
        self.tok, self.budget = tok, budget
        self.pad = tok.special[tasks.EOT]

    def docs(self, kind):
        g, rng = self.gen, self.rng
        if kind == "passkey":
            # Haystacks of passkey_min (8) to passkey_max sentences, log-uniform
            # (560: up to about 3,300 tokens; 690: the whole 4,096-token context).
            n = int(math.exp(rng.uniform(math.log(self.passkey_min), math.log(self.passkey_max))))
            first = self.passkey_doc(g.passkey(n))
            out = [first]
            for _ in range(max(1, self.budget // len(first[0])) - 1):
                out.append(self.passkey_doc(g.passkey(n)))
            return out
        make = {"arithmetic": g.arithmetic_doc, "copy": g.copy, "lookup": g.lookup}[kind]
        out, total = [], 0
        while total < self.budget:
            ids = self.tok.encode(make())
            out.append((ids, len(ids)))  # no pass-key reply: every target weighs 1
            total += len(ids)
        return out

    def passkey_doc(self, text):
        """(ids, where the reply starts): the reply is what follows the question, its
        tokens the ones --answer-weight weighs (the haystack's own tokens are most of a
        document and carry nothing of the key)."""
        ids = self.tok.encode(text)
        cut = text.rindex(tasks.PASSKEY_QUESTION) + len(tasks.PASSKEY_QUESTION)
        head = self.tok.encode(text[:cut])
        if head + self.tok.encode(text[cut:]) != ids:
            raise ValueError("a pass-key document does not tokenize apart at its question")
        return ids[:4096], len(head)

    def next(self):
        """(kind, tokens [B, T], mask of real tokens, weight of each token as a target:
        --answer-weight on pass-key replies, 1 elsewhere, 0 on padding, and the mask of
        the pass-key replies' tokens)."""
        r = self.rng.random()
        a, p, c = self.mix[:3]
        kind = "arithmetic" if r < a else ("passkey" if r < a + p else ("copy" if r < a + p + c else "lookup"))
        docs = self.docs(kind)
        T = max(len(d) for d, _ in docs)
        x = torch.full((len(docs), T), self.pad, dtype=torch.long)
        mask = torch.zeros(len(docs), T, dtype=torch.bool)
        weight = torch.zeros(len(docs), T)
        replies = torch.zeros(len(docs), T, dtype=torch.bool)
        for i, (d, reply) in enumerate(docs):
            x[i, :len(d)] = torch.tensor(d)
            mask[i, :len(d)] = True
            weight[i, :len(d)] = 1.0
            weight[i, reply:len(d)] = self.answer_weight
            replies[i, reply:len(d)] = True
        return kind, x, mask, weight, replies


def init_from(m, hf, directory):
    """Copy the weights of the exported checkpoint in directory into m, whose config
    (hf) must be the checkpoint's but for its dtype, index_topk and index_head_dim.
    With another index_head_dim the indexers' tensors keep m's initialisation (the
    indexer is then trained anew, --indexer-warmup); returns their names."""
    ck = Checkpoint(directory)
    # index_topk shapes no tensor: a continuation may select more or fewer keys.
    free = ("torch_dtype", "index_topk", "index_head_dim")
    theirs = {k: v for k, v in ck.config.items() if k not in free}
    ours = {k: v for k, v in json.loads(json.dumps(hf)).items() if k not in free}
    if theirs != ours:
        diff = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        raise SystemExit(f"--init {directory}: its config.json differs from this run's model in {diff}; "
                         f"give the --heads it was trained with")
    if any(ck.dtype(n) == "F8_E4M3" for n in ck.names()):
        raise SystemExit(f"--init {directory}: start from the bf16 export (cpmla-tiny), not the fp8 one")
    if ck.config.get("index_head_dim") == hf["index_head_dim"]:
        m.load_state_dict(load_checkpoint(ck, torch.float32).state_dict())
        return []
    theirs = load_checkpoint(ck, torch.float32).state_dict()
    ours = m.state_dict()
    fresh = [k for k in ours if ".indexer." in k]
    m.load_state_dict({k: (ours[k] if k in fresh else theirs[k]) for k in ours})
    return fresh


def attention_modules(m):
    return [mod for mod in m.modules() if isinstance(mod, Attention)]


def losses(m, x, mask, mtp_weight, weight=None, replies=None, indexer_reply_weight=1.0):
    """The training loss and its parts; weight (as Batches.next gives it, default the
    mask) weighs each token's next-token loss as a target, and the indexer's KL of a
    row whose next token is in replies weighs indexer_reply_weight times the others'."""
    logits, hn = m(x)
    V = logits.shape[-1]
    tw = (mask if weight is None else weight)[:, 1:].to(logits.dtype)
    lm = F.cross_entropy(logits[:, :-1].reshape(-1, V), x[:, 1:].reshape(-1), reduction="none").view_as(tw)
    lm = (lm * tw).sum() / tw.sum()
    mlog, _ = m.mtp(0, x[:, 1:], hn[:, :-1])
    mmask = mask[:, 2:]
    mtp = F.cross_entropy(mlog[:, :-1].reshape(-1, V), x[:, 2:].reshape(-1), reduction="none").view_as(mmask)
    mtp = (mtp * mmask).sum() / mmask.sum()
    kls = []
    for a in attention_modules(m):
        if a.index_kl is not None:
            rows = mask[:, : a.index_kl.shape[1]]
            if replies is not None and indexer_reply_weight != 1:
                # Row r is the query at token p = r + off (off 1 in the MTP layer, whose
                # row r reads token r + 1), which predicts token p + 1.
                W = a.index_kl.shape[1]
                off = x.shape[1] - W
                rows = rows.to(a.index_kl.dtype)
                nxt = torch.zeros_like(rows)
                nxt[:, : W - 1] = replies[:, off + 1:].to(rows.dtype)
                rows = rows * (1 + (indexer_reply_weight - 1) * nxt)
            kls.append((a.index_kl * rows).sum() / rows.sum())
            a.index_kl = None
    kl = torch.stack(kls).mean() if kls else torch.zeros(())
    return lm + mtp_weight * mtp + kl, lm, mtp, kl


def balance(m, rate):
    for mod in m.modules():
        if isinstance(mod, MoE) and getattr(mod, "last_experts", None) is not None:
            E = mod.cfg.n_routed_experts
            load = torch.bincount(mod.last_experts.reshape(-1), minlength=E).to(torch.float32)
            with torch.no_grad():
                mod.gate.e_score_correction_bias.add_(rate * torch.sign(load.mean() - load))
            mod.last_experts = None


@torch.no_grad()
def greedy(m, tok, prompt, max_new, stops):
    ids = tok.encode(prompt)
    out = []
    for _ in range(max_new):
        logits, _ = m(torch.tensor(ids + out))
        t = int(torch.argmax(logits[-1]))
        if t in stops:
            break
        out.append(t)
    return tok.decode(out)


def quick_eval(m, tok, heldout, n, show=None, max_new=40):
    """Greedy replies to n held-out problems, a pass key in each of CHECK_HAYSTACKS
    and 20 lookups: (share of problems right, keys found, lookups right).
    show, when given, is called with (prompt end, reply, expected) of each."""
    stops = {tok.special[tasks.EOT], tok.special[tasks.USER]}
    show = show or (lambda *a: None)
    right = 0
    for h in heldout[:n]:
        p, _ = tasks.arithmetic_plain(h["question"], h["working"], h["answer"])
        text = greedy(m, tok, p, max_new, stops)
        right += text.strip().endswith(f"#### {h['answer']}")
        show(p[-60:], text, h["answer"])
    rng = random.Random(5)
    found = 0
    for n_sentences in CHECK_HAYSTACKS:
        key = rng.randint(10000, 99999)
        hay = tasks.passkey_haystack(rng, n_sentences, rng.random(), key)
        text = greedy(m, tok, f"{tasks.USER}{tasks.passkey_prompt(hay)}{tasks.ASSISTANT}", 12, stops)
        found += str(key) in text
        show(f"pass key in {n_sentences} sentences", text, key)
    g, looked = tasks.Generator(77, []), 0
    for _ in range(20):
        prompt, reply = g.lookup_pair()
        want = reply.replace(tasks.EOT, "").replace(tasks.USER, "").strip()
        text = greedy(m, tok, prompt, 12, stops)
        looked += text.strip() == want
        show(prompt[-60:], text, want)
    return right / n, found, looked


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--dense-fraction", type=float, default=0.7)
    ap.add_argument("--budget", type=int, default=2048, help="tokens per batch")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--heads", type=int, default=2, help="attention heads of the model")
    ap.add_argument("--index-topk", type=int, default=128,
                    help="keys the indexer selects per query in the sparse stage (config.json's index_topk)")
    ap.add_argument("--index-head-dim", type=int, default=64,
                    help="dimensions of an indexer head, the first 64 rotated (config.json's index_head_dim; "
                         "GLM-5 and DeepSeek-V3.2: 128)")
    ap.add_argument("--indexer-warmup", type=int, default=0,
                    help="first N steps: dense attention, the loss the indexers' KL only, no gradient for any other "
                         "parameter (DeepSeek-V3.2's dense warm-up); the routers' balancing bias, set outside "
                         "backpropagation, still follows the experts' loads")
    ap.add_argument("--passkey-max", type=int, default=560, help="most filler sentences of a passkey haystack")
    ap.add_argument("--answer-weight", type=float, default=1.0,
                    help="weight of a pass-key reply's tokens in the next-token loss, against 1 for the haystack's")
    ap.add_argument("--indexer-dense-target", action="store_true",
                    help="in the sparse stage, train the indexer against the heads' attention over every earlier key "
                         "(computed without gradients), not only over the keys it selected")
    ap.add_argument("--indexer-answer-weight", type=float, default=1.0,
                    help="weigh the indexer's KL on the rows that predict a pass-key reply's tokens W times the "
                         "other rows' (1: every row alike; a reply is five digit rows of a 4,096-token document)")
    ap.add_argument("--indexer-target-topk", action="store_true",
                    help="with --indexer-dense-target: keep in the indexer's target only each row's index_topk keys "
                         "that the heads' dense attention weighs most, renormalised")
    ap.add_argument("--passkey-min", type=int, default=8, help="fewest filler sentences of a passkey haystack")
    ap.add_argument("--eval-only", action="store_true",
                    help="with --resume: print the greedy check's replies and scores of the saved state "
                         "(sparse attention, as the check during training), then stop")
    ap.add_argument("--bias-rate", type=float, default=1e-3)
    ap.add_argument("--eval-every", type=int, default=0, help="greedy check of held-out problems every N steps (0: at the end only)")
    ap.add_argument("--save-every", type=int, default=100)
    ap.add_argument("--resume", action="store_true", help="continue from state.pt in --out")
    ap.add_argument("--init", default="",
                    help="start from the weights of this exported bf16 checkpoint directory (its tokenizer too), "
                         "with a fresh optimizer and schedule, instead of a random initialisation; "
                         "--resume continues such a run from its state.pt")
    ap.add_argument("--mix", default="0.6,0.3,0.1", help="shares of arithmetic, passkey, copy and (optional, default 0) lookup batches")
    ap.add_argument("--working", choices=("plain", "digits"), default="plain",
                    help="the arithmetic working of the training problems: one equation per step, or "
                         "column by column (tasks.digit_step); the tokenizer is fitted on plain either way")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop after this many steps (of a schedule of --steps), saving the state and exporting the checkpoints")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    os.makedirs(args.out, exist_ok=True)
    log = open(os.path.join(args.out, "train.log"), "a")

    def say(s):
        print(s, flush=True)
        log.write(s + "\n")
        log.flush()

    heldout = tasks.heldout_arithmetic(HELDOUT)
    if args.init:
        tok = bpe.load(args.init)
    else:
        fit = tasks.Generator(args.seed + 7, [h["key"] for h in heldout]).corpus_sample(3000)
        tok = bpe.Tokenizer(bpe.fit_merges(fit, N_MERGES))
    bpe.save(tok, args.out)
    with open(os.path.join(args.out, "heldout.jsonl"), "w") as f:
        for h in heldout:
            f.write(json.dumps({"question": h["question"], "answer": h["answer"]}) + "\n")
    if not 1 <= args.index_topk <= 4096:
        raise SystemExit(f"--index-topk {args.index_topk} must be between 1 and the context, 4096")
    if args.index_head_dim < 64 or args.index_head_dim % 2:
        raise SystemExit(f"--index-head-dim {args.index_head_dim}: want an even number of at least "
                         f"qk_rope_head_dim, 64")
    hf = hf_config(tok, args.heads, args.index_topk, args.index_head_dim)
    cfg = Config.from_hf(hf)
    m = Model(cfg)
    init_weights(m, 0.02)
    fresh = init_from(m, hf, args.init) if args.init else []
    if fresh and not args.indexer_warmup:
        raise SystemExit(f"--init {args.init} has indexers of another index_head_dim, so theirs start anew: "
                         f"give --indexer-warmup N to train them before the model attends through them")
    opt = torch.optim.AdamW(m.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.01)
    start = 0
    state_path = os.path.join(args.out, "state.pt")
    if args.resume and os.path.exists(state_path):
        st = torch.load(state_path)
        m.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start = st["step"]
    if args.eval_only:
        given = ["--" + k.replace("_", "-") for k in TRAINING_FLAGS if getattr(args, k) != ap.get_default(k)]
        if given:
            raise SystemExit(f"--eval-only does not train, so it takes none of {' '.join(given)}; "
                             f"give only --out, --resume, --heads, --index-topk, --index-head-dim, --seed and --threads")
        if not start:
            raise SystemExit("--eval-only reads the state of a run: give --resume and an --out with state.pt")
        for a in attention_modules(m):
            a.indexer_loss, a.dense_attention = False, False
        m.eval()
        acc, found, looked = quick_eval(m, tok, heldout[HELDOUT - 20:], 20,
                                        lambda p, text, want: print(f"{p!r} -> {text!r} (want {want})"), max_new=100)
        print(f"eval step {start}: arithmetic {acc:.2f} (20 held-out), passkey {found}/4, lookup {looked}/20")
        return
    mix = [float(v) for v in args.mix.split(",")]
    if len(mix) not in (3, 4) or min(mix) < 0 or abs(sum(mix) - 1) > 1e-9:
        raise SystemExit(f"--mix {args.mix}: want three or four shares summing to 1, e.g. 0.6,0.3,0.1")
    if not 1 <= args.passkey_min <= args.passkey_max:
        raise SystemExit(f"--passkey-min {args.passkey_min} must be at least 1 and at most --passkey-max {args.passkey_max}")
    if args.indexer_target_topk and not args.indexer_dense_target:
        raise SystemExit("--indexer-target-topk narrows the target of --indexer-dense-target: give both")
    if args.indexer_answer_weight < 1:
        raise SystemExit(f"--indexer-answer-weight {args.indexer_answer_weight} must be at least 1 (1: every row alike)")
    if args.answer_weight < 1:
        raise SystemExit(f"--answer-weight {args.answer_weight} must be at least 1 (1: every token alike)")
    batches = Batches(args.seed, tok, heldout, args.budget, mix, args.passkey_max, args.working, args.passkey_min,
                      args.answer_weight)
    check_tokens = 100 if args.working == "digits" else 40  # the longest working, with room
    for _ in range(start):
        batches.next()
    dense_steps = int(args.steps * args.dense_fraction)
    if not 0 <= args.indexer_warmup <= args.steps:
        raise SystemExit(f"--indexer-warmup {args.indexer_warmup} must be between 0 and --steps {args.steps}")
    indexer_params = {id(p) for n, p in m.named_parameters() if ".indexer." in n}
    warm = 100
    t0 = time.time()
    say(f"params {sum(p.numel() for p in m.parameters())} steps {args.steps} dense {dense_steps} budget {args.budget}")
    for step in range(start, args.steps):
        warmup = step < args.indexer_warmup
        dense = step < dense_steps or warmup
        for a in attention_modules(m):
            a.dense_attention = dense
            a.indexer_loss = True
            a.indexer_dense_target = args.indexer_dense_target
            a.indexer_target_topk = args.indexer_target_topk
        lr = args.lr * min(1.0, (step + 1) / warm) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * step / args.steps)))
        for g in opt.param_groups:
            g["lr"] = lr
        kind, x, mask, weight, replies = batches.next()
        loss, lm, mtp, kl = losses(m, x, mask, 0.3, weight, replies, args.indexer_answer_weight)
        opt.zero_grad(set_to_none=True)
        if warmup:
            # Only the indexers learn by gradient: their KL is the loss, and the
            # other parameters get no gradient, so AdamW leaves them (and their
            # weight decay) alone. balance() below still moves the routers'
            # e_score_correction_bias, which no gradient trains.
            kl.backward()
            for p in m.parameters():
                if id(p) not in indexer_params:
                    p.grad = None
        else:
            loss.backward()
        torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
        opt.step()
        balance(m, args.bias_rate)
        if step % 25 == 0:
            say(f"step {step} {'indexer warm-up' if warmup else 'dense' if dense else 'sparse'} {kind} T={x.shape[1]} B={x.shape[0]} lm {lm.item():.4f} "
                f"mtp {mtp.item():.4f} kl {kl.item():.4f} lr {lr:.2e} t {time.time() - t0:.0f}s")
        if (step + 1) % args.save_every == 0 or step + 1 == args.steps or step + 1 == args.stop_after:
            torch.save({"model": m.state_dict(), "opt": opt.state_dict(), "step": step + 1}, state_path)
        if step + 1 == args.stop_after:
            say(f"stopped after step {step + 1}, t {time.time() - t0:.0f}s")
            break
        if (args.eval_every and (step + 1) % args.eval_every == 0) or step + 1 == args.steps:
            for a in attention_modules(m):
                a.indexer_loss = False
                a.dense_attention = False
            m.eval()
            acc, found, looked = quick_eval(m, tok, heldout[HELDOUT - 20:], 20, max_new=check_tokens)
            m.train()
            say(f"eval step {step + 1}: arithmetic {acc:.2f} (20 held-out), passkey {found}/4, lookup {looked}/20, t {time.time() - t0:.0f}s")
    for a in attention_modules(m):
        a.indexer_loss = False
        a.dense_attention = False
    for name, dtype in (("cpmla-tiny", "bf16"), ("cpmla-tiny-fp8", "fp8")):
        export.export(m, hf, os.path.join(args.out, name), dtype)
        bpe.save(tok, os.path.join(args.out, name))
    say(f"done in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
