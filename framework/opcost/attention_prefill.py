"""The prefill attention family (hardware.op_model=fitted; docs/model.md, "Per-shape operator
laws"): the prefilling sequences' part of a GQA/MHA attention call is costed by the law of its class
(`op_fit.attention_prefill.<kv dtype>_hd<head dim>`; the call is law-costed where the chip also
has the class's decode law, opcost.attention_decode, which costs its decoding sequences)

    t = t0 + h [pairs 4 hd / (P e_a) + tokens tau_tok + seqs tau_seq]

(h query heads per chip, P the KV dtype's dense peak). The law's microbenchmark times TensorRT-LLM's
attention call with fused QKV input, so RoPE and the KV write are inside it (opcost.elementwise).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from decodelab.opcost.base import (
    ATTN_KEY,
    Ctx,
    Price,
    Step,
    attention_fitted,
    attention_key,
    gqa_attention,
    peak,
)
from decodelab.kernel_layout import Law, Lin

NAME = "attention_prefill"
FIT_GROUPS = ("attention_prefill",)


def prefill_attention_time(law, pairs, tokens, seqs, heads, head_dim, peak: float):
    """Seconds of one prefill attention call over `seqs` sequences with `tokens` query tokens
    and `pairs` causal (query, key) pairs in total; `heads` query heads (per chip)."""
    pairs, tokens, seqs = (np.asarray(x, float) for x in (pairs, tokens, seqs))
    per_pair = 4.0 * head_dim / (peak * law.e_a)
    return law.t0_us * 1e-6 + heads * (
        pairs * per_pair + tokens * law.tau_tok_ns * 1e-9 + seqs * law.tau_seq_ns * 1e-9
    )


matches = gqa_attention  # the same ops as the other attention family


def price(op, ctx: Ctx) -> Optional[Price]:
    if not attention_fitted(ctx, op):
        return None
    a, h, hd = ctx.hw.op_fit.attention_prefill[attention_key(ctx, op)], op.attn_heads, op.attn_head_dim
    cols = {
        Lin.T0: a.t0_us * 1e-6,
        Lin.A_PAIR: 4.0 * h * hd / (peak(ctx.hw, ctx.kv_dtype) * a.e_a),
        Lin.A_TOK: h * a.tau_tok_ns * 1e-9,
        Lin.A_SEQ: h * a.tau_seq_ns * 1e-9,
    }
    return Price(NAME, Law.ATTN, cols, law=a)


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    """The prefilling sequences' part of the call (nothing where the op has none)."""
    if op.path == "decode" or step.pre_tokens < 0.5:
        return 0.0, 0.0, 0.0
    a, pk = p.law, peak(ctx.hw, ctx.kv_dtype)
    t = prefill_attention_time(
        a, step.pre_pairs, step.pre_tokens, step.pre_seqs, op.attn_heads, op.attn_head_dim, pk
    )
    return float(t) - a.t0_us * 1e-6, a.t0_us * 1e-6, 0.0


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    return None  # said once for the call, by opcost.attention_decode


def check(hw) -> List[str]:
    return [
        f"hardware.op_fit.attention_prefill.{key}: the key must be <bf16|fp8>_hd<head_dim>"
        for key in hw.op_fit.attention_prefill
        if not ATTN_KEY.match(key)
    ]
