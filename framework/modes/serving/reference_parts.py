"""The pure-Python reference scheduler's request record and per-sequence token arithmetic
(framework/modes/serving/reference.py): the KV a sequence holds and reads under the model's caps,
sliding-window and sparse layers and the pool's states, the mirror of the kernel's parts.py."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Req:
    idx: int
    prompt: float
    output: float
    arrival: float = math.nan
    start: float = math.nan
    first: float = math.nan
    done_t: float = math.nan
    preempted: int = 0
    max_itl: float = 0.0
    prefilled: float = 0.0  # prompt (or recompute) tokens processed so far
    target: float = 0.0  # tokens to prefill: the prompt, or prompt + generated on recompute
    gen: float = 0.0
    blocks: float = 0.0
    last: float = 0.0
    next_req: int = -1  # closed loop: the request its end issued
    first_step: int = -1  # the steps that emitted its first and last token
    done_step: int = -1

    def prefilling(self) -> bool:
        return self.prefilled < self.target


def _caps(caps):
    return [float(c) if c > 0 else None for c in caps]


def held(p: float, g: float, caps) -> float:
    prompt_cap, total_cap, _ = _caps(caps)
    kept = min(p, prompt_cap) if prompt_cap else p
    n = kept + g - 1
    return min(n, total_cap) if total_cap else n


def attended(p: float, ctx: float, caps) -> float:
    if ctx <= p:
        return ctx
    prompt_cap, total_cap, read_cap = _caps(caps)
    n = (min(p, prompt_cap) if prompt_cap else p) + ctx - p
    for cap in (total_cap, read_cap):
        if cap:
            n = min(n, cap)
    return n


def pool_tokens(n: float, eng: dict) -> float:
    """Pool token-equivalents of a sequence holding n tokens (sliding layers: the window, or
    slide_mem x n; a held sequence's states in the pool: state_tokens)."""
    state = eng.get("state_tokens", 0.0) if n > 0 else 0.0
    s = eng.get("slide", 0.0)
    if s <= 0:
        return n + state
    kept = min(n, eng["window"]) if eng["slide_mem"] < 0 else eng["slide_mem"] * n
    return (1 - s) * n + s * kept + state


def read_and_pairs(q: float, a: float, eng: dict):
    """(KV token-equivalents read, causal pairs) of q new tokens ending at context a, averaged over
    full layers, sliding ones (each query sees at most `window` keys) and sparse attention's share
    (at most `topk`)."""
    full = max(q * a - q * (q - 1) / 2, q)
    s, sp = eng.get("slide", 0.0), eng.get("sparse", 0.0)
    if s <= 0 and sp <= 0:
        return a, full
    read, pairs = (1 - s - sp) * a, (1 - s - sp) * full
    for share, w in ((s, eng.get("window", 0.0)), (sp, eng.get("topk", 0.0))):
        if share <= 0:
            continue
        lo = a - q + 1
        every = q * (lo + a) / 2  # each query sees all keys before it
        first = max(lo, w + 1)  # queries past the window see w keys: drop the rest
        over = (first - w + a - w) * (a - first + 1) / 2 if a >= first else 0.0
        read, pairs = read + share * min(a, w + q - 1), pairs + share * max(every - over, q)
    return read, pairs
