"""The MLA BMM family (hardware.op_model=fitted; docs/model.md, "Per-shape operator laws"): MLA's absorbed decode
BMMs (components/models/mla_attn.py `q_absorb`: q_nope x W_UK, role `pre`; `v_absorb`: the attention output x W_UV,
role `post`; Op.mla_bmm) from a table of the engine's own kernels (`hardware.op_tables.mla_bmm`,
`mla_bmm_by_engine.<family>`; shipped from AIConfigurator's mla_bmm_perf by tools/aic_kernel_tables.py, DeepSeek's
dims: 128 nope, 512 latent, 128 v per head).

A row times one call over `num_heads` heads per GPU at `num_tokens` decode tokens, in `bmm_dtype`: FP8 where the
op's weights are quantized (FP8, block FP8, NVFP4), BF16 where they are 16-bit (a BF16 checkpoint; NVIDIA's NVFP4
DeepSeek checkpoints keep their attention projections in BF16, model.quant_bf16_ops), as AIConfigurator's DeepSeek
model picks it (the BMMs inherit the kv projection's dtype). The op takes the curve at its heads on the kernel's token grid (opcost/
tables.py grid_row), t0 its fastest call. The engine's own table first, then the chip's (TensorRT-LLM's); heads or
a dtype no table holds, or a chip other than the one the tables were measured on, keep the roofline law."""

from __future__ import annotations

from typing import List, Optional, Tuple

from decodelab.opcost import tables
from decodelab.opcost.base import Ctx, Price, Step, check_tables, engine_tables, gemm_dtype
from decodelab.opcost.tablecache import table_cache

NAME = "mla_bmm"
FIT_GROUPS = ()
COLUMNS = ["role", "bmm_dtype", "num_tokens", "num_heads", "latency_ms"]
ROLES = {"pre": "pre", "post": "post"}
FP8_WEIGHTS = ("fp8", "fp8_block", "nvfp4")  # checkpoints whose BMM weights are FP8


def _read(path: str):
    return tables.read(path, COLUMNS, "an MLA BMM", "role", ROLES, "pre or post rows")


@table_cache(maxsize=64)
def curves(path: str) -> dict:
    """(role, bmm dtype, heads) -> the seconds of one call on the kernel's M_GRID (read-only)."""
    df = _read(path)
    out = {}
    for (role, dtype, heads), g in df.groupby(["role", "bmm_dtype", "num_heads"], sort=True):
        t = g.groupby("num_tokens").latency_ms.median() * 1e-3
        if len(t) >= 2:
            out[(str(role), str(dtype), int(heads))] = tables.grid_row(
                t.index.to_numpy(float), t.to_numpy(float)
            )
    return out


def matches(op) -> bool:
    return bool(getattr(op, "mla_bmm", ()))


def bmm_dtype(op, ctx: Ctx) -> str:
    """The table dtype of the op's BMM: its own weight dtype (model.quant_bf16_ops keeps NVIDIA's NVFP4
    DeepSeek checkpoints' BMMs in BF16), else the workload's."""
    return "fp8" if gemm_dtype(op, ctx.weight_dtype) in FP8_WEIGHTS else "bfloat16"


def lookup(op, ctx: Ctx):
    """The op's curve (M_GRID seconds) from the engine's own table, then the chip's; None: no table holds it."""
    key = (str(op.mla_bmm[0]), bmm_dtype(op, ctx), int(round(op.mla_bmm[1])))
    return tables.first_curve(engine_tables(ctx, NAME), curves, key)


def price(op, ctx: Ctx) -> Optional[Price]:
    at = lookup(op, ctx)
    return None if at is None else tables.curve_price(NAME, at)


def reference(op, ctx: Ctx, p: Price, step: Step) -> Tuple[float, float, float]:
    return tables.curve_reference(p, step)


def missed(op, ctx: Ctx, priced) -> Optional[str]:
    if not matches(op) or NAME in priced:
        return None
    return f"no op_tables.mla_bmm {op.mla_bmm[0]} row at {bmm_dtype(op, ctx)}, {op.mla_bmm[1]:g} heads"


def problem(path: str) -> Optional[str]:
    return tables.problem(curves, path)


def check(hw) -> List[str]:
    return check_tables(hw, NAME, problem)
