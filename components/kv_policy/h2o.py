"""H2O, heavy-hitter oracle (Zhang et al., NeurIPS 2023, arXiv 2306.14048): keep the `budget`
tokens with the largest attention accumulated over all past queries (heavy hitters) plus the
`window` most recent tokens; at every decode step the new token enters and the lowest-scoring
non-recent token leaves, so the cache is a constant hh + recent tokens (static layout). The
paper's setting is 10% heavy + 10% recent of the sequence: set budget and window to those
token counts. Per query head (the paper's MHA models) on a GQA model, a KV head holds the union
of its G query heads' heavy hitters: window + G * budget at most.

Costs the cache size does not show:
- prefill: the accumulated scores need the attention probabilities of every (query, key) pair,
  which flash attention never writes: one more QK^T + softmax pass over the causal pairs
  (P(P+1)/2 H (2 dq + 6) FLOPs per layer), the prompt's keys read again, and FP32 accumulators
  (P H_sel, written and read);
- decode: each step reads and writes the FP32 accumulator of every held token, per selecting
  head: 8 H_sel bytes per token and layer (decode_overhead_bytes).

  stored(P, t) = min(P + t, window + G * budget)     read per step = stored
"""

from __future__ import annotations

from decodelab.components.kv_policy import cost


def _cap(pol, model=None) -> float:
    return cost.union_kept(float(pol.window), float(pol.budget), cost.group(pol, model))


def check(pol, model) -> list:
    e = []
    if pol.budget < 0:
        e.append(f"kv_policy.budget={pol.budget} must be >= 0 (heavy-hitter tokens kept)")
    if pol.window < 1:
        e.append(f"kv_policy.window={pol.window} must be >= 1 (recent tokens kept)")
    cost.check_granularity(pol, model, e)
    return e


def cached_tokens(pol, prompt_len: int, generated: int, model=None) -> float:
    return float(min(prompt_len + generated, _cap(pol, model)))


def kernel_params(pol, model=None) -> dict:
    return {"prompt_cap": 0.0, "total_cap": _cap(pol, model), "read_cap": 0.0}


def slot_layout(pol) -> str:
    return "static"


def slot_capacity(pol, model=None) -> float:
    return _cap(pol, model)


def decode_overhead_bytes(pol, model, stored: float) -> float:
    """FP32 accumulated score of every held token, read and written each step, per selecting
    head and layer."""
    return 2.0 * cost.SCORE_BYTES * cost.h_sel(pol, model) * cost.kv_shape(model)["L"] * stored


def prefill_overhead(pol, model, prompt_len: int, kv_bytes: float = 2.0, act_bytes: float = 2.0) -> dict:
    s = cost.kv_shape(model)
    P = float(prompt_len)
    pairs = P * (P + 1.0) / 2.0
    h_sel = cost.h_sel(pol, model)
    flops = pairs * s["H"] * (2.0 * s["dq"] + 6.0) + P * s["H"]
    byts = P * s["Hkv"] * s["dk"] * kv_bytes + 2.0 * cost.SCORE_BYTES * P * h_sel
    return {"flops": s["L"] * flops, "bytes": s["L"] * byts}
