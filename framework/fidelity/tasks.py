"""Seeded, offline tasks for the fidelity runs, built as token-id lists so lengths are exact.

Passkey retrieval (needle in a haystack): an instruction, filler sentences generated from a small
seeded grammar, the needle sentence ("The pass key is 71432. Remember it.") inserted at a
depth between 0 (right after the instruction) and 1 (just before the question), and the question
after the context ("What is the pass key? The pass key is"). The answer is the digits the model
generates greedily. Filler is generated sentence by sentence and tokenized sentence by sentence,
so the filler before the needle is the same token sequence for every length and depth of one
seed: its KV can be computed once and shared (model.prefill's `past`).

Text for perplexity / next-token agreement: a frozen copy of the project's docs/model.md shipped
next to this module (eval_text.md, ~4.3k tokens), so the numbers do not drift as the docs change.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import List

import numpy as np

INTRO = (
    "There is a pass key hidden inside a lot of irrelevant text. Find it and memorize it. "
    "I will quiz you about the pass key."
)
NEEDLE = " The pass key is {key}. Remember it."
QUESTION = " What is the pass key? The pass key is"

_ADJ = ("quiet", "old", "small", "bright", "green", "tall", "busy", "calm", "dark", "warm", "cold", "large")
_NOUN = (
    "river",
    "village",
    "forest",
    "market",
    "garden",
    "bridge",
    "harbor",
    "library",
    "meadow",
    "station",
    "valley",
    "orchard",
    "workshop",
    "tower",
    "field",
    "road",
)
_AGENT = (
    "farmer",
    "teacher",
    "painter",
    "sailor",
    "baker",
    "traveler",
    "child",
    "doctor",
    "miller",
    "weaver",
    "merchant",
    "gardener",
)
_VERB = (
    "walked to",
    "looked at",
    "talked about",
    "painted",
    "visited",
    "cleaned",
    "passed",
    "remembered",
    "described",
    "crossed",
    "repaired",
    "watched",
)
_TIME = (
    "in the morning",
    "after lunch",
    "before sunset",
    "at night",
    "on Sunday",
    "in spring",
    "during the storm",
    "every day",
    "last winter",
    "at noon",
)
_TAIL = (
    "The air was still.",
    "Nothing else happened.",
    "It was an ordinary day.",
    "Birds sang in the trees.",
    "The clouds moved slowly.",
    "People went about their work.",
)


def filler_sentences(seed: int, n: int) -> List[str]:
    """`n` seeded filler sentences, each starting with a space."""
    rng = np.random.default_rng(seed)
    pick = lambda xs: xs[int(rng.integers(len(xs)))]  # noqa: E731
    out = []
    for _ in range(n):
        if rng.random() < 0.15:
            out.append(" " + pick(_TAIL))
        else:
            out.append(
                f" The {pick(_ADJ)} {pick(_AGENT)} {pick(_VERB)} the {pick(_ADJ)} {pick(_NOUN)} {pick(_TIME)}."
            )
    return out


def passkey(seed: int, digits: int = 5) -> str:
    rng = np.random.default_rng([seed, 7919])
    return str(int(rng.integers(10 ** (digits - 1), 10**digits)))


@dataclass
class PasskeySample:
    tokens: np.ndarray  # prompt token ids
    answer: str  # the pass key digits
    needle_span: tuple  # [start, end) token positions of the needle sentence
    shared_prefix: int  # leading tokens identical for every length/depth of this seed
    length: int
    depth: float


class Haystack:
    """Token pieces of one seed's haystack: instruction, filler sentences (as many as the longest
    prompt needs), needle and question."""

    def __init__(self, tok, seed: int, max_len: int, digits: int = 5):
        self.seed = seed
        self.key = passkey(seed, digits)
        enc = lambda s: tok.encode(s).ids  # noqa: E731
        self.intro, self.needle, self.question = enc(INTRO), enc(NEEDLE.format(key=self.key)), enc(QUESTION)
        self.sentences: List[List[int]] = []
        total = 0
        budget = max_len - len(self.intro) - len(self.needle) - len(self.question)
        for s in filler_sentences(seed, max(16, max_len // 4)):
            if total >= budget:
                break
            self.sentences.append(enc(s))
            total += len(self.sentences[-1])
        self.cum = np.cumsum([0] + [len(s) for s in self.sentences])

    def prefix_tokens(self, n_sentences: int) -> np.ndarray:
        return np.array(self.intro + [t for s in self.sentences[:n_sentences] for t in s], np.int64)

    def sample(self, length: int, depth: float) -> PasskeySample:
        """A prompt of at most `length` tokens (the filler fills it up to one sentence short) with
        the needle after the filler sentence closest to fraction `depth` of the filler."""
        room = length - len(self.intro) - len(self.needle) - len(self.question)
        n = int(np.searchsorted(self.cum, room, side="right")) - 1  # whole sentences that fit
        if n < 1 or n > len(self.sentences):
            raise ValueError(f"length {length}: outside 1..{len(self.sentences)} filler sentences")
        cut = int(np.argmin(np.abs(self.cum[: n + 1] - depth * self.cum[n])))
        pre = self.prefix_tokens(cut)
        rest = [t for s in self.sentences[cut:n] for t in s]
        toks = np.concatenate([pre, self.needle, rest, self.question]).astype(np.int64)
        return PasskeySample(
            toks, self.key, (len(pre), len(pre) + len(self.needle)), len(pre), length, float(depth)
        )


def score_answer(generated: str, key: str) -> dict:
    """Exact match of the first len(key) digits the model wrote, and the fraction of them right."""
    digits = "".join(c for c in generated if c.isdigit())[: len(key)]
    right = sum(a == b for a, b in zip(digits, key))
    return {"exact": float(digits == key), "digits": right / len(key), "text": generated}


EVAL_TEXT = Path(__file__).resolve().parent / "eval_text.md"


def project_text(path: str = "") -> str:
    """The text task's text: `path`, or the shipped frozen copy of docs/model.md (eval_text.md)."""
    p = Path(path) if path else EVAL_TEXT
    if not p.is_file():
        raise FileNotFoundError(f"text.file: {p} does not exist")
    return p.read_text(encoding="utf-8")
