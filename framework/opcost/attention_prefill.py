"""The prefill attention family (hardware.op_model=fitted; docs/model.md, "Per-shape operator
laws"): the prefilling sequences' part of a GQA/MHA attention call is costed by the law of its class
(`op_fit.attention_prefill.<kv dtype>_hd<head dim>`; the call is law-costed where the chip also
has the class's decode law, opcost.attention_decode, which costs its decoding sequences)

    t = t0 + h [pairs 4 hd / (P e_a) + tokens tau_tok + seqs tau_seq]

(h query heads per chip, P the KV dtype's dense peak). The law's microbenchmark times TensorRT-LLM's
attention call with fused QKV input, so RoPE and the KV write are inside it (opcost.elementwise).

MLA's prefill attention (components/models/mla_attn.py `attention_prefill`: the non-absorbed path over
decompressed keys and values) takes the same law with hd the mean of its qk and v head dims (2 h (qk + v)
FLOPs a pair), from `op_fit.mla_prefill.<kv dtype>` or the engine's own `mla_prefill_by_engine.<family>`,
fitted to AIConfigurator's context_mla_perf tables (DeepSeek's dims, heads per GPU).
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
FIT_GROUPS = ("attention_prefill", "mla_prefill")


def prefill_attention_time(law, pairs, tokens, seqs, heads, head_dim, peak: float):
    """Seconds of one prefill attention call over `seqs` sequences with `tokens` query tokens
    and `pairs` causal (query, key) pairs in total; `heads` query heads (per chip)."""
    pairs, tokens, seqs = (np.asarray(x, float) for x in (pairs, tokens, seqs))
    per_pair = 4.0 * head_dim / (peak * law.e_a)
    return law.t0_us * 1e-6 + heads * (
        pairs * per_pair + tokens * law.tau_tok_ns * 1e-9 + seqs * law.tau_seq_ns * 1e-9
    )


def mla_prefill(op) -> bool:
    """MLA's prefill attention op (its heads per chip set, no GQA head dim)."""
    return (
        op.name == "attention_prefill"
        and op.path == "prefill"
        and op.attn_heads > 0
        and op.attn_head_dim == 0
    )


def matches(op) -> bool:
    return gqa_attention(op) or mla_prefill(op)  # GQA: the same ops as the other attention family


def mla_law(ctx: Ctx):
    """The MLA prefill law of the design's engine and KV dtype (its own, else the chip's), or None."""
    fit = ctx.hw.op_fit
    own = fit.mla_prefill_by_engine.get(ctx.engine, {}).get(ctx.kv_dtype)
    return own or fit.mla_prefill.get(ctx.kv_dtype)


def law_shape(op, ctx: Ctx):
    """(law, query heads per chip, head dim of the law) of the op, or None where no law costs it."""
    if mla_prefill(op):
        law = mla_law(ctx)
        return None if law is None else (law, op.attn_heads, op.attn_flops_per_ctx / (4.0 * op.attn_heads))
    if not attention_fitted(ctx, op):
        return None
    return ctx.hw.op_fit.attention_prefill[attention_key(ctx, op)], op.attn_heads, op.attn_head_dim


def price(op, ctx: Ctx) -> Optional[Price]:
    shape = law_shape(op, ctx)
    if shape is None:
        return None
    a, h, hd = shape
    cols = {
        Lin.T0: a.t0_us * 1e-6,
        Lin.A_PAIR: 4.0 * h * hd / (peak(ctx.hw, ctx.kv_dtype) * a.e_a),
        Lin.A_TOK: h * a.tau_tok_ns * 1e-9,
        Lin.A_SEQ: h * a.tau_seq_ns * 1e-9,
    }
    return Price(NAME, Law.ATTN, cols, law=shape)


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    """The prefilling sequences' part of the call (nothing where the op has none)."""
    if op.path == "decode" or step.pre_tokens < 0.5:
        return 0.0, 0.0, 0.0
    a, h, hd = p.law
    t = prefill_attention_time(
        a, step.pre_pairs, step.pre_tokens, step.pre_seqs, h, hd, peak(ctx.hw, ctx.kv_dtype)
    )
    return float(t) - a.t0_us * 1e-6, a.t0_us * 1e-6, 0.0


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    return None  # said once for the call, by opcost.attention_decode


def check(hw) -> List[str]:
    e = [
        f"hardware.op_fit.attention_prefill.{key}: the key must be <bf16|fp8>_hd<head_dim>"
        for key in hw.op_fit.attention_prefill
        if not ATTN_KEY.match(key)
    ]
    mla = [("mla_prefill", hw.op_fit.mla_prefill)]
    mla += [(f"mla_prefill_by_engine.{eng}", laws) for eng, laws in hw.op_fit.mla_prefill_by_engine.items()]
    for group, laws in mla:
        e += [
            f"hardware.op_fit.{group}.{k}: the key must be bf16 or fp8"
            for k in laws
            if k not in ("bf16", "fp8")
        ]
    return e


def fitted_laws(hw) -> List[tuple]:
    """(group, key, law) of the engines' own MLA prefill laws whose values the registry checks."""
    return [
        (f"mla_prefill_by_engine.{eng}", key, law)
        for eng, laws in hw.op_fit.mla_prefill_by_engine.items()
        for key, law in laws.items()
    ]
