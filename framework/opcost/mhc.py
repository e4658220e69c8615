"""The hyper-connection family (hardware.op_model=fitted; docs/model.md, "Per-shape operator laws"): DeepSeek-V4's
manifold-constrained hyper-connection mixing (components/models/csa.py `hc_pre`, `hc_post`: Op.mhc) from a table of
the engine's own kernels (`hardware.op_tables.mhc`, `mhc_by_engine.<family>`; shipped from AIConfigurator's
mhc_module_perf by tools/aic_kernel_tables.py).

A table row times one role (`pre`: the fp32 mixing GEMV, Sinkhorn and the weighted sum; `post`: the streams
rewritten) at one token count for hc_mult streams of a hidden size, over `num_sites` sublayers back to back (2: the
attention's and the FFN's, inside one CUDA graph). An op is one site, so it takes latency / num_sites, the median
over repeated rows, on the kernel's token grid as a GEMM table's (opcost/tables.py grid_row), t0 its fastest call.
The engine's own table first, then the chip's; a shape no table holds, or a chip other than the one the tables were
measured on, keeps the roofline law (the note says which)."""

from __future__ import annotations

from typing import List, Optional, Tuple

from decodelab.opcost import tables
from decodelab.opcost.base import Ctx, Price, Step, check_tables, engine_tables
from decodelab.opcost.tablecache import table_cache

NAME = "mhc"
FIT_GROUPS = ()
COLUMNS = ["role", "num_tokens", "hc_mult", "hidden_size", "num_sites", "latency_ms"]
ROLES = {"pre": "pre", "post": "post"}


def _read(path: str):
    return tables.read(path, COLUMNS, "a hyper-connection", "role", ROLES, "pre or post rows")


@table_cache(maxsize=64)
def curves(path: str) -> dict:
    """(role, hc_mult, hidden size) -> the seconds of one site on the kernel's M_GRID (read-only)."""
    df = _read(path)
    df = df.assign(site_s=df.latency_ms * 1e-3 / df.num_sites.clip(lower=1))
    out = {}
    for (role, hc, hidden), g in df.groupby(["role", "hc_mult", "hidden_size"], sort=True):
        t = g.groupby("num_tokens").site_s.median()
        if len(t) >= 2:
            out[(str(role), int(hc), int(hidden))] = tables.grid_row(
                t.index.to_numpy(float), t.to_numpy(float)
            )
    return out


def matches(op) -> bool:
    return bool(getattr(op, "mhc", ()))


def lookup(op, ctx: Ctx):
    """The op's curve (M_GRID seconds) from the engine's own table, then the chip's; None: no table holds it."""
    key = (str(op.mhc[0]), int(op.mhc[1]), int(op.mhc[2]))
    return tables.first_curve(engine_tables(ctx, NAME), curves, key)


def price(op, ctx: Ctx) -> Optional[Price]:
    at = lookup(op, ctx)
    return None if at is None else tables.curve_price(NAME, at)


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    return tables.curve_reference(p, step)


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    if not matches(op) or NAME in priced:
        return None
    return f"no op_tables.mhc {op.mhc[0]} row at hc_mult {op.mhc[1]}, hidden {op.mhc[2]}"


def problem(path: str) -> Optional[str]:
    return tables.problem(curves, path)


def check(hw) -> List[str]:
    return check_tables(hw, NAME, problem)
