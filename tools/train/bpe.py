"""cpmla-tiny's tokenizer: byte-level BPE in Hugging Face's tokenizer.json format.

The pre-tokenizer is a Sequence of Split(\\p{N}, Isolated), so every digit is a
token of its own (the arithmetic reads digit by digit), and ByteLevel with GPT-2's
pattern. The merges are fitted here on a sample of the training tasks; the four
special tokens (tasks.SPECIAL) are added tokens after the BPE vocabulary.

Training text is ASCII, so encode() pre-tokenizes with an ASCII rendering of the
GPT-2 pattern; build.py checks its ids against cpmla's own tokenizer on a
sample before training starts.
"""

import collections
import json
import re

import tasks


def bytes_to_unicode():
    """GPT-2's map from the 256 byte values to printable characters."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    out, extra = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + extra)
            extra += 1
    return out


BYTE_CHAR = bytes_to_unicode()
GPT2_ASCII = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""")
DIGIT = re.compile(r"[0-9]")
SPECIAL_SPLIT = re.compile("(" + "|".join(re.escape(s) for s in tasks.SPECIAL) + ")")


def pretokens(text):
    """The byte-level pre-tokens of text without special tokens, as mapped strings."""
    if not text.isascii():
        raise ValueError("the training encoder handles ASCII text only")
    out, last = [], 0
    pieces = []
    for m in DIGIT.finditer(text):
        if m.start() > last:
            pieces.append(text[last:m.start()])
        pieces.append(m.group())
        last = m.end()
    if last < len(text):
        pieces.append(text[last:])
    for p in pieces:
        for w in GPT2_ASCII.findall(p):
            out.append("".join(BYTE_CHAR[b] for b in w.encode()))
    return out


def fit_merges(texts, n_merges):
    freq = collections.Counter()
    for t in texts:
        for seg in SPECIAL_SPLIT.split(t):
            if seg and seg not in tasks.SPECIAL:
                freq.update(pretokens(seg))
    words = {w: list(w) for w in freq}
    merges = []
    for _ in range(n_merges):
        pairs = collections.Counter()
        for w, syms in words.items():
            for a, b in zip(syms, syms[1:]):
                pairs[(a, b)] += freq[w]
        if not pairs:
            break
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        joined = best[0] + best[1]
        for w, syms in words.items():
            i, out = 0, []
            while i < len(syms):
                if i + 1 < len(syms) and syms[i] == best[0] and syms[i + 1] == best[1]:
                    out.append(joined)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            words[w] = out
    return merges


class Tokenizer:
    def __init__(self, merges):
        self.vocab = {BYTE_CHAR[b]: b for b in range(256)}
        for a, b in merges:
            self.vocab[a + b] = len(self.vocab)
        self.merges = merges
        self.rank = {m: i for i, m in enumerate(merges)}
        self.special = {s: len(self.vocab) + i for i, s in enumerate(tasks.SPECIAL)}
        self.size = len(self.vocab) + len(self.special)
        self.id_to_token = {i: t for t, i in self.vocab.items()}
        self.id_to_token.update({i: s for s, i in self.special.items()})
        self.cache = {}

    def word(self, w):
        ids = self.cache.get(w)
        if ids is not None:
            return ids
        syms = list(w)
        while len(syms) > 1:
            best, at = None, -1
            for i in range(len(syms) - 1):
                r = self.rank.get((syms[i], syms[i + 1]))
                if r is not None and (best is None or r < best):
                    best, at = r, i
            if best is None:
                break
            syms[at:at + 2] = [syms[at] + syms[at + 1]]
        ids = [self.vocab[s] for s in syms]
        self.cache[w] = ids
        return ids

    def encode(self, text):
        out = []
        for seg in SPECIAL_SPLIT.split(text):
            if not seg:
                continue
            if seg in self.special:
                out.append(self.special[seg])
                continue
            for w in pretokens(seg):
                out.extend(self.word(w))
        return out

    def decode(self, ids):
        inv = {c: b for b, c in BYTE_CHAR.items()}
        out, buf = [], bytearray()
        for i in ids:
            t = self.id_to_token[i]
            if t in self.special:
                out.append(buf.decode() + t)
                buf = bytearray()
            else:
                buf.extend(inv[c] for c in t)
        out.append(buf.decode())
        return "".join(out)

    def tokenizer_json(self):
        added = [{"id": i, "content": s, "single_word": False, "lstrip": False, "rstrip": False,
                  "normalized": False, "special": True} for s, i in self.special.items()]
        return {
            "version": "1.0",
            "truncation": None,
            "padding": None,
            "added_tokens": added,
            "normalizer": None,
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": "\\p{N}"}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
            ]},
            "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
            "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                      "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                      "vocab": self.vocab, "merges": [[a, b] for a, b in self.merges]},
        }


CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}<|system|>{{ message['content'] }}"
    "{%- elif message['role'] == 'user' -%}<|user|>{{ message['content'] }}"
    "{%- elif message['role'] == 'assistant' -%}<|assistant|>{{ message['content'] }}"
    "{%- else -%}{{ raise_exception('cpmla-tiny knows the roles system, user and assistant') }}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}<|assistant|>{%- endif -%}"
)


def tokenizer_config():
    return {
        "added_tokens_decoder": {},
        "bos_token": None,
        "eos_token": tasks.EOT,
        "pad_token": tasks.EOT,
        "clean_up_tokenization_spaces": False,
        "model_max_length": 4096,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }


def save(tok, directory):
    with open(f"{directory}/tokenizer.json", "w") as f:
        json.dump(tok.tokenizer_json(), f, ensure_ascii=False, indent=1)
        f.write("\n")
    cfg = tokenizer_config()
    cfg["added_tokens_decoder"] = {str(i): {"content": s, "lstrip": False, "normalized": False, "rstrip": False,
                                            "single_word": False, "special": True} for s, i in tok.special.items()}
    with open(f"{directory}/tokenizer_config.json", "w") as f:
        json.dump(cfg, f, ensure_ascii=False, indent=1)
        f.write("\n")


def load(directory):
    """The tokenizer save wrote into directory."""
    with open(f"{directory}/tokenizer.json") as f:
        tj = json.load(f)
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in tj["model"]["merges"]]
    tok = Tokenizer(merges)
    if tok.tokenizer_json() != tj:
        raise ValueError(f"{directory}/tokenizer.json is not a tokenizer this script writes")
    return tok


def parity_texts():
    """Texts whose ids cpmla's tokenizer must reproduce (checkpoints/testdata): every
    task in both forms, and whitespace, digit and contraction edge cases."""
    g = tasks.Generator(99, [])
    texts = [g.arithmetic_doc() for _ in range(8)] + [g.passkey(30) for _ in range(3)] + [g.copy() for _ in range(4)]
    return texts + ["Question: Ana has 12 apples.\nAnswer:", "  two  spaces\tand\ttabs\n\n", "1234567890",
                    "don't we'll I'm they've"]


def main():
    import argparse
    ap = argparse.ArgumentParser(description="write the ids of parity_texts() under a checkpoint's tokenizer.json")
    ap.add_argument("--tokenizer", required=True, help="directory with tokenizer.json")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(f"{args.tokenizer}/tokenizer.json") as f:
        tj = json.load(f)
    tok = Tokenizer([tuple(m) for m in tj["model"]["merges"]])
    if tok.tokenizer_json()["model"]["vocab"] != tj["model"]["vocab"]:
        raise SystemExit("the merges do not rebuild the file's vocabulary")
    texts = parity_texts()
    with open(args.out, "w") as f:
        json.dump({"texts": texts, "ids": [tok.encode(t) for t in texts]}, f)
        f.write("\n")


if __name__ == "__main__":
    main()
