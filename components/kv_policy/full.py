"""Full KV cache: every prompt and generated token is kept and read at every decode step."""
from __future__ import annotations


def cached_tokens(pol, prompt_len: int, generated: int) -> int:
    """Tokens held per sequence after `generated` tokens were produced."""
    return prompt_len + generated


def kernel_params(pol) -> dict:
    """Plain parameters for the kernel: kv_cap = cached-token cap (0 = none), read_frac = share
    of the cached tokens read per decode step."""
    return {"kv_cap": 0.0, "read_frac": 1.0}
