"""The synthetic tasks cpmla-tiny is trained on, each with an exactly computable answer.

  arithmetic  a word problem with one or two steps on two-digit numbers, answered in
              GSM8K's format: the working (one equation per step, or column by
              column: digit_step), then a line "#### N" (lm-eval's gsm8k
              exact-match reads the number after "####").
  passkey     a five-digit pass key hidden at any depth of a haystack of filler
              sentences, asked for at the end (the needle-in-a-haystack test of
              long-context models).
  copy        a string of random words repeated exactly.
  lookup      names each with a number, one of them asked back (train.py's optional
              fourth --mix share).

Every task comes in two forms: plain text, as lm-eval's completion requests send it
("Question: ...\\nAnswer:"), and a chat, rendered with the model's chat template
(<|user|>...<|assistant|>..., the reply ended by <|user|>, one of the eos tokens).

The held-out arithmetic problems (heldout_arithmetic) come from their own seed; a
training problem with the same numbers and operations as a held-out one is
regenerated, so no held-out computation is ever seen in training.
"""

import random

NAMES = ["Ana", "Ben", "Carla", "Dev", "Elif", "Femi", "Gus", "Hana", "Ivan", "Jade",
         "Kofi", "Lena", "Mateo", "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sami", "Tara"]
OBJECTS = ["apples", "books", "coins", "pencils", "stickers", "marbles", "cards", "shells",
           "stamps", "cookies", "buttons", "beads", "eggs", "plums", "rocks"]
GAINS = ["buys {n} more {o}", "finds {n} more {o}", "gets {n} more {o}", "is given {n} more {o}"]
LOSSES = ["gives away {n} {o}", "loses {n} {o}", "sells {n} {o}", "uses {n} {o}"]

FILLER = [
    "The grass is green.", "The sky is blue.", "The sun is yellow.", "Here we go.",
    "There and back again.", "The river runs to the sea.", "Birds sing in the morning.",
    "The road is long and quiet.", "Snow falls on the hills.", "A cat sleeps by the door.",
    "The wind moves the trees.", "Rain comes after the clouds.", "The night is dark and calm.",
    "Boats rest in the harbor.", "The bread is warm.", "Leaves turn red in the fall.",
]

EOT = "<|endoftext|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
SPECIAL = [EOT, USER, ASSISTANT, "<|system|>"]


def arithmetic_numbers(rng):
    """(a, [(op, n), ...]): a and every n in [10, 99], every intermediate result in [0, 199]."""
    a = rng.randint(10, 99)
    steps, v = [], a
    for _ in range(rng.choice((1, 2))):
        can_add, can_sub = 199 - v >= 10, v >= 10
        if can_sub and (not can_add or rng.random() < 0.5):
            n = rng.randint(10, min(99, v))
            steps.append(("-", n))
            v -= n
        else:
            n = rng.randint(10, min(99, 199 - v))
            steps.append(("+", n))
            v += n
    return a, steps


def arithmetic_key(a, steps):
    return (a,) + tuple(x for s in steps for x in s)


def digit_step(v, op, n):
    """The working of v op n column by column, as written by hand: the ones, then
    the tens with the carry or the borrow, then the result, e.g.
    "38 + 45: 8 + 5 = 13, 3 + 4 + 1 = 8, so 83." or
    "52 - 27: 12 - 7 = 5, 5 - 1 - 2 = 2, so 25." (v < 200, 10 <= n < 100;
    the tens of a three-digit v are one number, 10 to 19)."""
    vt, vo, nt, no = v // 10, v % 10, n // 10, n % 10
    if op == "+":
        ones = vo + no
        carry = ones // 10
        ones_s = f"{vo} + {no} = {ones}"
        tens_s = f"{vt} + {nt} + 1 = {vt + nt + 1}" if carry else f"{vt} + {nt} = {vt + nt}"
        w = v + n
    else:
        borrow = vo < no
        ones_s = f"{vo + 10 * borrow} - {no} = {vo + 10 * borrow - no}"
        tens_s = f"{vt} - 1 - {nt} = {vt - 1 - nt}" if borrow else f"{vt} - {nt} = {vt - nt}"
        w = v - n
    return f"{v} {op} {n}: {ones_s}, {tens_s}, so {w}.", w


def arithmetic_text(rng, a, steps, working="plain"):
    """(question, working, answer) of one problem; working "plain" writes each step
    as "v op n = w.", "digits" column by column (digit_step)."""
    name, obj = rng.choice(NAMES), rng.choice(OBJECTS)
    parts = [f"{name} has {a} {obj}."]
    for i, (op, n) in enumerate(steps):
        verb = rng.choice(GAINS if op == "+" else LOSSES).format(n=n, o=obj)
        parts.append(("Then " if i else "") + f"{name} {verb}.")
    parts.append(f"How many {obj} does {name} have now?")
    work, v = [], a
    for op, n in steps:
        if working == "digits":
            text, w = digit_step(v, op, n)
        else:
            w = v + n if op == "+" else v - n
            text = f"{v} {op} {n} = {w}."
        work.append(text)
        v = w
    return " ".join(parts), " ".join(work), v


def arithmetic_plain(question, working, answer):
    """lm-eval gsm8k's layout: the prompt ends at "Answer:", the target follows."""
    return f"Question: {question}\nAnswer:", f" {working}\n#### {answer}"


def passkey_haystack(rng, n_sentences, depth, key):
    """Filler sentences with the needle after round(depth * n_sentences) of them."""
    fill = [rng.choice(FILLER) for _ in range(n_sentences)]
    at = round(depth * n_sentences)
    needle = f"The pass key is {key}. Remember it. {key} is the pass key."
    return " ".join(fill[:at] + [needle] + fill[at:])


PASSKEY_QUESTION = "What is the pass key?"


def passkey_prompt(haystack):
    return f"{haystack}\n{PASSKEY_QUESTION}"


def passkey_reply(key):
    return f"The pass key is {key}."


def copy_text(rng):
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 5))) for _ in range(rng.randint(3, 10))]
    return " ".join(words)


def heldout_arithmetic(n, seed=20261201):
    """The evaluation problems: [{"question", "answer", "key"}], distinct numbers."""
    rng = random.Random(seed)
    out, seen = [], set()
    while len(out) < n:
        a, steps = arithmetic_numbers(rng)
        k = arithmetic_key(a, steps)
        if k in seen:
            continue
        seen.add(k)
        q, w, v = arithmetic_text(rng, a, steps)
        out.append({"question": q, "working": w, "answer": v, "key": list(k)})
    return out


class Generator:
    """Training documents (strings with special tokens written out), seeded."""

    def __init__(self, seed, heldout_keys, working="plain"):
        self.rng = random.Random(seed)
        self.heldout = set(tuple(k) for k in heldout_keys)
        self.working = working  # arithmetic_text's working style

    def arithmetic(self):
        rng = self.rng
        while True:
            a, steps = arithmetic_numbers(rng)
            if arithmetic_key(a, steps) not in self.heldout:
                break
        q, w, v = arithmetic_text(rng, a, steps, self.working)
        if rng.random() < 0.5:
            p, t = arithmetic_plain(q, w, v)
            return p + t
        return f"{USER}Question: {q}{ASSISTANT}{w}\n#### {v}"

    def arithmetic_doc(self):
        """One to three problems; plain ones are joined by blank lines as in few-shot prompts."""
        docs = [self.arithmetic() for _ in range(self.rng.choice((1, 1, 2, 3)))]
        plain = [d for d in docs if not d.startswith(USER)]
        chats = [d for d in docs if d.startswith(USER)]
        out = ""
        if plain:
            out += "\n\n".join(plain) + EOT
        return out + ("".join(chats) + USER if chats else "")

    def passkey(self, n_sentences):
        rng = self.rng
        key = rng.randint(10000, 99999)
        hay = passkey_haystack(rng, n_sentences, rng.random(), key)
        if rng.random() < 0.5:
            return f"{passkey_prompt(hay)} {passkey_reply(key)}{EOT}"
        return f"{USER}{passkey_prompt(hay)}{ASSISTANT}{passkey_reply(key)}{USER}"

    def copy(self):
        s = copy_text(self.rng)
        if self.rng.random() < 0.5:
            return f"Repeat exactly: {s}\nCopy: {s}{EOT}"
        return f"{USER}Repeat exactly: {s}{ASSISTANT}{s}{USER}"

    def lookup_pair(self):
        """(prompt, reply) of a lookup: two to six names, each with a number of two to
        five digits, and one of them asked back: the step that arithmetic (the
        question's operands) and the pass key need, attention from a word to the digits
        after its earlier occurrence."""
        rng = self.rng
        names = rng.sample(NAMES, rng.randint(2, 6))
        nums = [rng.randint(10 ** (d - 1), 10 ** d - 1) for d in (rng.randint(2, 5) for _ in names)]
        facts = " ".join(f"{nm} has {n}." for nm, n in zip(names, nums))
        i = rng.randrange(len(names))
        q = f"How many does {names[i]} have?"
        if rng.random() < 0.5:
            return f"{facts}\n{q}", f" {names[i]} has {nums[i]}.{EOT}"
        return f"{USER}{facts}\n{q}{ASSISTANT}", f"{names[i]} has {nums[i]}.{USER}"

    def lookup(self):
        return "".join(self.lookup_pair())

    def corpus_sample(self, n):
        """Text for fitting the tokenizer's merges."""
        out = []
        for i in range(n):
            out.append([self.arithmetic_doc, lambda: self.passkey(20), self.copy][i % 3]())
        return out
