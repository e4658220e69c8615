"""Full KV cache: every prompt and generated token is kept and read at every decode step."""
from __future__ import annotations


def cached_tokens(pol, prompt_len: int, generated: int) -> int:
    """Tokens held per sequence after `generated` tokens were produced."""
    return prompt_len + generated


def kernel_params(pol) -> dict:
    """Caps on the KV tokens kept and read (0 = none; framework.kernel.attended_tokens):
    prompt_cap on prompt tokens kept after prefill, total_cap on tokens held, read_cap on tokens
    read per decode step."""
    return {"prompt_cap": 0.0, "total_cap": 0.0, "read_cap": 0.0}
