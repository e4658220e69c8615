"""Full KV cache: every prompt and generated token is kept and read at every decode step.

Policy interface (every module in components/kv_policy/ provides it; docs/kv_policies.md, "How a
policy enters the model"):
  check(pol, model) -> list of one-line problems (ConfigError lines)
  cached_tokens(pol, prompt_len, generated, model=None) -> tokens stored per sequence
  kernel_params(pol, model=None) -> {prompt_cap, total_cap, read_cap} (0 = none; the caps
      decodelab.core.kernel.attended_tokens applies: stored = min(min(P, prompt_cap) + t, total_cap),
      read per decode step = min(stored, read_cap); prefill attends everything)
  slot_layout(pol) -> "static" (a fixed slot of slot_capacity tokens) | "growing"
  slot_capacity(pol, model=None) -> tokens of a static slot (0 for growing)
  read_tokens(pol, model, stored) -> KV token-equivalents read per decode step, layer-averaged
      (what the caps give, plus what they cannot express: Quest's page metadata, dense layers)
  read_coeffs(pol, model) -> {dense, page, meta}: read_tokens in the kernel's terms: a `dense`
      share of layers reads every stored token, the rest min(stored, read_cap), plus `meta`
      token-equivalents per `page` stored tokens (0 = none)
  decode_overhead_bytes(pol, model, stored) -> extra bytes per decode step (H2O's scores)
  prefill_overhead(pol, model, prompt_len, kv_bytes, act_bytes) -> {flops, bytes} of selection
"""

from __future__ import annotations

from decodelab.components.kv_policy.cost import NO_COST


def check(pol, model) -> list:
    return []


def cached_tokens(pol, prompt_len: int, generated: int, model=None) -> float:
    """Tokens held per sequence after `generated` tokens were produced."""
    return float(prompt_len + generated)


def kernel_params(pol, model=None) -> dict:
    """Caps on the KV tokens kept and read (0 = none; decodelab.core.kernel.attended_tokens):
    prompt_cap on prompt tokens kept after prefill, total_cap on tokens held, read_cap on tokens
    read per decode step."""
    return {"prompt_cap": 0.0, "total_cap": 0.0, "read_cap": 0.0}


def slot_layout(pol) -> str:
    return "growing"


def slot_capacity(pol, model=None) -> float:
    return 0.0


def read_tokens(pol, model, stored: float) -> float:
    return float(stored)


def read_coeffs(pol, model) -> dict:
    return {"dense": 0.0, "page": 0.0, "meta": 0.0}


def decode_overhead_bytes(pol, model, stored: float) -> float:
    return 0.0


def prefill_overhead(pol, model, prompt_len: int, kv_bytes: float = 2.0, act_bytes: float = 2.0) -> dict:
    return dict(NO_COST)
