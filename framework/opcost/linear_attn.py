"""The linear-attention family (hardware.op_model=fitted; docs/model.md, "Per-shape operator laws"): a hybrid model's
linear-layer kernels (components/models/linear_attn.py: Gated DeltaNet, Kimi Delta Attention) from a table of the
engine's own kernels (`hardware.op_tables.linear_attention`, `linear_attention_by_engine.<family>`; shipped from
AIConfigurator's gdn_perf / kda_perf by tools/aic_kernel_tables.py).

A table row is one kernel at one shape per chip: kind (gdn, kda), role, key and value heads, their head dims, the
conv kernel, and the sequences of a decode step (roles `conv_update`, `decode`, `decode_conv`) or the tokens of one
prompt (roles `conv`, `prefill`), every row at an fp32 recurrent state. An op (Op.recurrence) is costed at a step's
tokens on its path from the curve of its role at its exact shape, median over rows repeated at other model widths:
    t = t0 + table(m),  m = the decode tokens (decode roles) or the prefill tokens (prefill roles)
the curve on the kernel's token grid as a GEMM table's (opcost/tables.py grid_row: non-decreasing, linear beyond its
last point), t0 its fastest call. Where a table times the decode only fused with the short convolution
(`decode_conv`: SGLang's KDA decode at Kimi-K3's 12 heads a chip), the decode op takes it and the conv update op
costs nothing. The engine's own table first, then the chip's; a shape or a role no table holds keeps the roofline
law (the note says which), as does a chip other than the one the tables were measured on (no law carries a kernel
table). A decode op whose state is not fp32 (SGLang's --mamba-ssm-dtype bfloat16) reads the curve at the sequences
that move its bytes (state_ratio: equal bytes, equal time; a stated assumption, the decode being bound by its state
traffic); a prefill reads its row as measured (its state is read and written once a prompt). A decode role is never
faster than its op's bytes (the states read and written, the activations) at the chip's HBM peak: the collectors time
one layer's states again and again, which a large L2 holds (L40S: 96 MB, RTX PRO 6000: 128 MB; rows up to 5x the HBM
peak at a few sequences), where a serving step reads every layer's states once, from HBM.
Stated limits: a prefill step of several prompts is read as one prompt of all their tokens, and speculative
verification (several tokens a sequence) as that many decoding sequences."""

from __future__ import annotations

from typing import List, Optional, Tuple

import numpy as np

from decodelab.opcost import tables
from decodelab.opcost.base import Ctx, Price, Step, check_tables, engine_tables, hbm_bw
from decodelab.opcost.tablecache import table_cache
from decodelab.kernel_layout import M_GRID, Law

NAME = "linear_attention"
FIT_GROUPS = ()
COLUMNS = ["kind", "role", "batch_size", "seq_len", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim"]
COLUMNS += ["d_conv", "latency_ms"]
ROLES = {"conv_update": "batch_size", "decode": "batch_size", "decode_conv": "batch_size"}
ROLES.update(conv="seq_len", prefill="seq_len")  # role -> the column its curve runs over
SHAPE = ["kind", "role", "num_k_heads", "num_v_heads", "head_k_dim", "head_v_dim", "d_conv"]
# the tables' recurrent state: fp32 (AIConfigurator's collect_gdn.py / collect_kda.py), which a decode step reads and
# writes whole (state_ratio carries another dtype); the convolutions do not touch it, the prefill reads and writes it
# once a prompt
TABLE_STATE_BYTES = 4.0
DECODE_ROLES = ("conv_update", "decode", "decode_conv")


def _read(path: str):
    return tables.read(
        path, COLUMNS, "a linear-attention", "role", {r: r for r in ROLES}, "rows of a known role"
    )


@table_cache(maxsize=64)
def curves(path: str) -> dict:
    """(kind, role, key heads, value heads, dk, dv, conv kernel) -> its latency on the kernel's M_GRID (seconds,
    read-only): the median over repeated rows at each point of the role's axis."""
    df = _read(path)
    out = {}
    for key, g in df.groupby(SHAPE, sort=True):
        axis = ROLES[key[1]]
        t = g.groupby(axis).latency_ms.median()
        m, sec = t.index.to_numpy(float), t.to_numpy(float) * 1e-3
        if len(m) >= 2:
            shape = (str(key[0]), str(key[1]), *(int(v) for v in key[2:]))
            out[shape] = tables.grid_row(m, sec)
    return out


def matches(op) -> bool:
    return bool(getattr(op, "recurrence", ()))


def lookup(op, ctx: Ctx) -> Optional[Tuple[str, Optional[np.ndarray]]]:
    """(role read, its curve; None: the op costs nothing) of the op from the first table holding its kernel; a table
    that times the decode only fused with the convolution (`decode_conv`, no `decode`) gives the decode op that curve
    and the conv update nothing. None: no table holds it."""
    kind, role, *shape = op.recurrence
    dims = tuple(int(v) for v in shape[:-1])
    for path in engine_tables(ctx, NAME):
        got = curves(path)
        fused = got.get((kind, "decode_conv", *dims))
        if role in ("decode", "conv_update") and fused is not None and (kind, "decode", *dims) not in got:
            return "decode_conv", fused if role == "decode" else None
        own = got.get((kind, role, *dims))
        if own is not None:
            return role, own
    return None


def price(op, ctx: Ctx) -> Optional[Price]:
    got = lookup(op, ctx)
    if got is None:
        return None
    role, at = got
    if at is None:  # the conv update inside a fused decode kernel
        return Price(NAME, Law.SKIP, whole=True, law=None)
    if role in DECODE_ROLES:  # another state dtype (state_ratio); never below the HBM peak (module docstring)
        grid = np.asarray(M_GRID)
        at = np.interp(grid * state_ratio(op), grid, at)
        at = np.maximum(at, grid * op.act_bytes_per_token / hbm_bw(ctx.hw))
    return tables.curve_price(NAME, at)


def state_ratio(op) -> float:
    """A decode op's bytes a sequence over those of the tables' fp32 state at its shape (1 for the convolutions):
    a step of m sequences is read off the curve at the m x ratio sequences that move as many bytes."""
    kind, role, nk, nv, dk, dv, c, sb = op.recurrence
    own = op.act_bytes_per_token
    if role != "decode" or own <= 0:
        return 1.0
    return own / (own + 2.0 * nv * dk * dv * (TABLE_STATE_BYTES - float(sb)))


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    return (0.0, 0.0, 0.0) if p.law is None else tables.curve_reference(p, step)


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    if not matches(op) or NAME in priced:
        return None
    kind, role, nk, nv, dk, dv, c, sb = op.recurrence
    return f"no op_tables.linear_attention {kind} {role} row at {nk}/{nv} heads of {dk}x{dv}"


def problem(path: str) -> Optional[str]:
    return tables.problem(curves, path)


def check(hw) -> List[str]:
    return check_tables(hw, NAME, problem)
