"""The collectives family (hardware.op_model=fitted; docs/model.md "Per-shape operator laws"): an
op's tensor-parallel all-reduce or all-gather (components/ops.py coll_kind, coll_bytes_per_token)
is costed by the chip's law at its GPU count (`op_fit.all_reduce.tp<n>`, `all_gather.tp<n>`; an
engine's own all-reduce kernel: `all_reduce_by_engine.<family>.tp<n>`)

    t = (S < S* ? a_lo : a_hi) + S / beta,  S = bytes of the whole per-rank tensor,

or, for an op that is the all-reduce alone, from the measured table of the kernel its law
describes (`op_tables.all_reduce`: TensorRT-LLM's; `all_reduce_by_engine.<family>`: the engine's
own) at a GPU count it holds: log-log between the measured sizes, the smallest size's time below
them and the largest size's time per byte above. On an op that another family costs (the LM
head's logits all-gather after its GEMM) the law adds its time to that family's law.
"""

from __future__ import annotations

import re
from typing import Dict, List, Optional, Tuple

import numpy as np

from decodelab.opcost import tables
from decodelab.opcost.base import Ctx, Price, Step, check_tables, op_table
from decodelab.opcost.tablecache import table_cache
from decodelab.kernel_layout import Law, Lin, M_GRID

NAME = "collectives"
FIT_GROUPS = ("all_reduce", "all_gather")
COLLECTIVE_FIELDS = ("a_lo_us", "a_hi_us", "s_switch_bytes", "beta_gb_s")
_TP_KEY = re.compile(r"^tp(\d+)$")


def collective_time(law, s_bytes):
    """Seconds of one collective moving a per-rank tensor of `s_bytes` bytes (natural form)."""
    s = np.asarray(s_bytes, float)
    return np.where(s < law.s_switch_bytes, law.a_lo_us, law.a_hi_us) * 1e-6 + s / (law.beta_gb_s * 1e9)


AR_COLUMNS = ("allreduce_dtype", "num_gpus", "message_size", "latency_ms")
AR_BYTES = {"bfloat16": 2.0, "bf16": 2.0, "float16": 2.0, "half": 2.0}


@table_cache(maxsize=8)
def collective_curves(path: str) -> Dict[int, Tuple[np.ndarray, np.ndarray]]:
    """num_gpus -> (bytes of the whole per-rank tensor, seconds) of an all-reduce table in the
    operator-CSV schema (allreduce_dtype, num_gpus, message_size = elements, latency_ms; 16-bit
    rows), made non-decreasing in size by isotonic regression of log latency."""
    from scipy.optimize import isotonic_regression  # heavy: on use

    df = tables.read(path, AR_COLUMNS, "an all-reduce", "allreduce_dtype", AR_BYTES, "16-bit rows")
    df = df.assign(b=df.message_size * df.allreduce_dtype.map(AR_BYTES))
    out = {}
    for n, d in df.groupby("num_gpus"):
        d = d.groupby("b").latency_ms.mean().sort_index()
        t = np.exp(isotonic_regression(np.log(d.to_numpy(float) * 1e-3)).x)
        out[int(n)] = (d.index.to_numpy(float), t)
    return out


@table_cache(maxsize=4096)
def collective_row(path: str, n_gpus: int, bytes_per_token: float):
    """An all-reduce's seconds at the kernel's M_GRID token counts, the message being M_GRID x
    `bytes_per_token` bytes: log-log interpolation between the measured sizes, the smallest
    size's time below them and the largest size's time per byte above (read-only); None where the
    table has no row at this GPU count."""
    c = collective_curves(path).get(int(n_gpus))
    if c is None or bytes_per_token <= 0:
        return None
    b, t = c
    s = np.asarray(M_GRID) * bytes_per_token
    at = np.exp(np.interp(np.log(s), np.log(b), np.log(t)))
    big = s > b[-1]
    at[big] = t[-1] * s[big] / b[-1]
    at.setflags(write=False)
    return at


def matches(op) -> bool:
    return op.coll_kind in ("all_reduce", "all_gather") and op.coll_bytes_per_token > 0


def law_of(op, ctx: Ctx):
    """(law, table path) of the op's collective: the engine's own all-reduce law at the GPU count
    where the chip has one, else the chip's; the table of the kernel that law describes
    (op_tables.all_reduce_by_engine.<family> for the engine's own law, else op_tables.all_reduce;
    "" for an all-gather or where there is none). (None, "") where no law holds the GPU count."""
    fit, key = ctx.hw.op_fit, f"tp{ctx.tp}"
    group = {"all_reduce": fit.all_reduce, "all_gather": fit.all_gather}.get(op.coll_kind, {})
    own = fit.all_reduce_by_engine.get(ctx.engine, {}) if op.coll_kind == "all_reduce" else {}
    if key in own:
        group = own
    if key not in group or not op.coll_bytes_per_token > 0:
        return None, ""
    path = ""
    if op.coll_kind == "all_reduce":
        path = op_table(ctx.hw, "all_reduce", ctx.engine if group is own else "")
    return group[key], path


def price(op, ctx: Ctx) -> Optional[Price]:
    """The law's constants; the op's law (Law.COLL) and its table row only where it is the
    collective alone (`fallback`: no other family costs the op)."""
    c, path = law_of(op, ctx)
    if c is None:
        return None
    cols = {
        Lin.C_BYTES: op.coll_bytes_per_token,
        Lin.C_LO: c.a_lo_us * 1e-6,
        Lin.C_HI: c.a_hi_us * 1e-6,
        Lin.C_SW: c.s_switch_bytes,
        Lin.C_INV_BW: 1.0 / (c.beta_gb_s * 1e9),
    }
    tab = collective_row(path, ctx.tp, float(op.coll_bytes_per_token)) if path else None
    return Price(NAME, Law.COLL, cols, tab, Lin.G_TAB, fallback=True, law=c)


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    """(0, 0, collective seconds) of the op at `step`: from its table where it is the collective
    alone (p.tab kept), else by its law."""
    if p.tab is not None:
        return 0.0, 0.0, float(tables.table_time(0.0, p.tab, step.tokens))
    return 0.0, 0.0, float(collective_time(p.law, step.tokens * op.coll_bytes_per_token))


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    if op.coll_kind and ctx.tp > 1 and NAME not in priced:
        return f"{op.coll_kind} has no tp{ctx.tp} law"
    return None


def problem(path: str) -> Optional[str]:
    """The problem of the all-reduce table at `path` (one line), or None."""
    return tables.problem(collective_curves, path)


def check(hw) -> List[str]:
    """Keys of op_fit.all_reduce / all_gather / all_reduce_by_engine and the all-reduce tables."""
    fit, e = hw.op_fit, []
    for group in FIT_GROUPS:
        for key in getattr(fit, group):
            if not _TP_KEY.match(key):
                e.append(f"hardware.op_fit.{group}.{key}: the key must be tp<number of GPUs>")
    e += check_tables(hw, "all_reduce", problem)
    for eng, by_tp in fit.all_reduce_by_engine.items():  # untyped below the engine: checked here
        for key, law in by_tp.items():
            where = f"hardware.op_fit.all_reduce_by_engine.{eng}.{key}"
            if not _TP_KEY.match(key):
                e.append(f"{where}: the key must be tp<number of GPUs>")
            elif sorted(law) != sorted(COLLECTIVE_FIELDS):
                e.append(f"{where}: needs exactly the fields {', '.join(COLLECTIVE_FIELDS)}")
    return e


def fitted_laws(hw) -> List[tuple]:
    """(group, key, law) of the engines' own all-reduce laws whose values the registry checks."""
    return [
        (f"all_reduce_by_engine.{eng}", key, law)
        for eng, by_tp in hw.op_fit.all_reduce_by_engine.items()
        for key, law in by_tp.items()
        if _TP_KEY.match(key) and sorted(law) == sorted(COLLECTIVE_FIELDS)
    ]
