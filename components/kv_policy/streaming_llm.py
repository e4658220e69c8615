"""StreamingLLM (Xiao et al., ICLR 2024, arXiv 2309.17453): keep the first `sinks` tokens
(attention sinks) and the last `window` tokens; evict by position at every step. The cache stops
growing at sinks + window tokens: a constant per-slot capacity (static layout). No scoring, so
no prefill cost beyond the prompt itself (prefill attends the whole prompt, then the middle is
dropped). Reference code defaults: 4 sinks, 2000 recent tokens.

  stored(P, t) = min(P + t, S + W)        read per step = stored
"""

from __future__ import annotations


def _cap(pol) -> float:
    return float(pol.sinks + pol.window)


def check(pol, model) -> list:
    e = []
    if pol.sinks < 0:
        e.append(f"kv_policy.sinks={pol.sinks} must be >= 0")
    if pol.window < 1:
        e.append(f"kv_policy.window={pol.window} must be >= 1 (recent tokens kept; decode writes there)")
    return e


def cached_tokens(pol, prompt_len: int, generated: int, model=None) -> float:
    return float(min(prompt_len + generated, _cap(pol)))


def kernel_params(pol, model=None) -> dict:
    return {"prompt_cap": 0.0, "total_cap": _cap(pol), "read_cap": 0.0}


def slot_layout(pol) -> str:
    return "static"


def slot_capacity(pol, model=None) -> float:
    return _cap(pol)
