"""The registry of operator families (`hardware.op_model: fitted`, docs/model.md "Per-shape operator
laws"): which family's fitted law or measured table costs which op, reduced to a few per-op
constants the kernel evaluates with a few flops per step (the law columns of `op_lin`, kernel_layout.Lin,
decodelab/kernel_layout.py; all 0: the roofline law), their pure-Python reference timing, the
design's checks and its note. Each family is one module (opcost/README.md shows the seam):

  gemm               t = (Tc^p + Tm^p)^(1/p) + t0 (or its GEMM table at the op's shape)
  attention_prefill  t = t0 + h [pairs 4 hd / (P e_a) + tokens tau_tok + seqs tau_seq]
  attention_decode   t = t0 + ((c_sk seqs kvh)^p + (B_kv / BW_kv)^p)^(1/p) (or its table)
  mla                MLA's latent decode attention from its table
  moe                an MoE layer's routed-expert block from its table
  linear_attention   a hybrid model's Gated DeltaNet / KDA kernels from the engine's table
  mhc                DeepSeek-V4's hyper-connection mixing from the engine's table
  mla_bmm            MLA's absorbed decode BMMs from the engine's table
  collectives        t = (S < S* ? a_lo : a_hi) + S / beta (or the all-reduce's table)
  sampler            the engine's top-k / top-p sort path: t0 + s_per_tok x tokens
  elementwise        RoPE + KV write inside a law-costed attention call: nothing

Each t0 (and a_lo / a_hi) is a microbenchmark's in-graph figure: it contains the kernel boundary,
so a call costed by a law pays no `sync_us` (core/build.py zeroes it); `launch_us` (eager
launches, no CUDA graph) stays.
"""

from __future__ import annotations

from dataclasses import replace
from typing import List, Optional, Tuple

import numpy as np

from decodelab.opcost import (
    attention_decode,
    attention_prefill,
    collectives,
    elementwise,
    gemm,
    linear_attn,
    mhc,
    mla,
    mla_bmm,
    moe,
    sampler,
)
from decodelab.opcost.base import OP_MODELS, Ctx, Price, Step, check_releases, check_values, release_note
from decodelab.kernel_layout import Law, Lin

# Asked in this order; the first family whose price is `whole` costs the op alone (an MoE block
# before its ops' GEMM laws), the others' prices add up (a GEMM and its collective).
FAMILIES = (moe, elementwise, linear_attn, mhc, mla_bmm, sampler, gemm)
FAMILIES += (attention_prefill, attention_decode, mla, collectives)
BY_NAME = {f.NAME: f for f in FAMILIES}
# Checked in the order of hardware.op_tables' fields (core/schema_oplaw.py), laws' values in that of
# hardware.op_fit's: a design's errors read as they always have
CHECK_ORDER = (gemm, collectives, moe, linear_attn, mhc, mla_bmm, attention_prefill, attention_decode)
CHECK_ORDER += (mla, sampler, elementwise)
FIT_ORDER = ("gemm", "attention_prefill", "attention_decode", "all_reduce", "all_gather", "sampler")


def check(hw) -> List[str]:
    """Errors of `hardware.op_model`, `hardware.op_fit` and `hardware.op_tables` (one line each)."""
    if getattr(hw, "op_model", "roofline") not in OP_MODELS:
        return [f"hardware.op_model={hw.op_model!r} is not one of: {', '.join(OP_MODELS)}"]
    if hw.op_model != "fitted":
        return []
    e = []
    if hw.execution == "dataflow":  # an unknown execution is reported by core.checks alone
        e.append(
            f"hardware.op_model=fitted needs hardware.execution=gpu (the laws time single GPU "
            f"kernels), got {hw.execution!r}"
        )
    e += check_releases(hw)
    for fam in CHECK_ORDER:
        e += fam.check(hw)
    fit, groups = hw.op_fit, [g for fam in FAMILIES for g in fam.FIT_GROUPS]
    groups.sort(key=lambda g: FIT_ORDER.index(g) if g in FIT_ORDER else len(FIT_ORDER))
    laws = [(g, k, law) for g in groups for k, law in (getattr(fit, g, None) or {}).items()]
    for group, key, law in laws + collectives.fitted_laws(hw) + attention_prefill.fitted_laws(hw):
        e += check_values(group, key, law)
    return e


def prices(op, ctx: Ctx) -> Tuple[Price, ...]:
    """The prices of the families that cost `op` (none: the roofline law), once per op and
    context (Ctx.memo)."""
    if not ctx.fitted:
        return ()
    seen = ctx.memo.get(id(op))
    if seen is not None and seen[0] is op:
        return seen[1]
    got = _prices(op, ctx)
    ctx.memo[id(op)] = (op, got)
    return got


def _prices(op, ctx: Ctx) -> Tuple[Price, ...]:
    got = []
    for fam in FAMILIES:
        p = fam.price(op, ctx) if fam.matches(op) else None
        if p is None:
            continue
        if p.whole:
            return (p,)
        got.append(p)
    if any(not p.fallback for p in got):  # a fallback's law and table only where it is alone
        got = [replace(p, code=Law.NONE, tab=None) if p.fallback else p for p in got]
    return tuple(got)


def law_code(ps) -> float:
    """The kernel_layout.Law an op's prices put it under (Law.NONE: the roofline law)."""
    codes = [p.code for p in ps if p.code != Law.NONE]
    return codes[-1] if codes else Law.NONE


def columns(op, ctx: Ctx) -> np.ndarray:
    """The op's law columns of `op_lin`, op_lin[o, Lin.LAW:] (all 0: the roofline law)."""
    row = np.zeros(Lin.size)
    for p in prices(op, ctx):
        if p.code != Law.NONE:
            row[Lin.LAW] = p.code
        for col, v in p.cols.items():
            row[col] = v
        if p.tab is not None:  # a measured table in place of the law
            row[p.tab_flag] = 1.0
            row[Lin.TAB : Lin.TAB + p.tab.size] = p.tab
    return row[Lin.LAW :]


def reference(op, ctx: Ctx, ps, step: Step) -> Tuple[float, float, float]:
    """(seconds beyond t0, t0, collective seconds) of a law-costed op at `step`, in natural form
    (core/reference.py, the kernel's independent twin)."""
    t = t0 = coll = 0.0
    for p in ps:
        a, b, c = BY_NAME[p.family].reference(op, ctx, p, step)
        t, t0, coll = t + a, t0 + b, coll + c
    return t, t0, coll


def note(ops, ctx: Ctx) -> Optional[str]:
    """One note naming the ops the fitted laws do not cover (costed by the roofline law), with the
    families' notes on the design (a table measured on another chip) and on single ops (an MoE
    block carried from a nearby measured one); None under the roofline op_model."""
    if not ctx.fitted:
        return None
    notes = [n for fam in FAMILIES if (n := _note(fam, ctx))] + [n for n in (release_note(ctx),) if n]
    missed = []
    for op in ops:
        ps = prices(op, ctx)
        priced = tuple(p.family for p in ps)
        notes += [n for p in ps if (n := _note(BY_NAME[p.family], ctx, op, p))]
        missed += [f"{op.name} ({why})" for fam in FAMILIES if (why := fam.missed(op, ctx, priced))]
    if missed:
        notes.append("op_model=fitted: roofline law for " + ", ".join(dict.fromkeys(missed)))
    return "; ".join(notes) or None


def _note(fam, ctx: Ctx, op=None, p: Optional[Price] = None) -> Optional[str]:
    fn = getattr(fam, "note", None)
    return fn(ctx, op, p) if fn else None


def run_notes(ops, ctx: Ctx) -> List[str]:
    """The design's notes on its operator costs: note(), then each family's standalone note (the
    sampler's path, under either op_model)."""
    out = [note(ops, ctx)]
    out += [fn(ctx) for fam in FAMILIES if (fn := getattr(fam, "standalone_note", None))]
    return [n for n in out if n]
