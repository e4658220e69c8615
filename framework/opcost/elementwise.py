"""The elementwise family: an op the engine runs inside the attention call of its head dim
(components/ops.py in_attention_call: RoPE and the KV write, `rope_kv_write`) costs nothing where
that call is law-costed (the attention microbenchmarks time TensorRT-LLM's attention call with
fused QKV input, RoPE and the KV write inside it: opcost.attention_prefill / attention_decode).
Every other elementwise op (norms, activations, residual adds) keeps the roofline law: no
microbenchmark law covers it yet; a law for them is a new module beside this one."""

from __future__ import annotations

from typing import List, Optional, Tuple

from decodelab.opcost.base import Ctx, Price, Step, attention_fitted
from decodelab.kernel_layout import Law

NAME = "elementwise"
FIT_GROUPS = ()


def matches(op) -> bool:
    return bool(op.in_attention_call)


def price(op, ctx: Ctx) -> Optional[Price]:
    return Price(NAME, Law.SKIP, whole=True) if attention_fitted(ctx, op) else None


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    return 0.0, 0.0, 0.0  # skipped: inside the attention call's time


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    return None


def check(hw) -> List[str]:
    return []
