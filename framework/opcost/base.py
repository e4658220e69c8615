"""What every operator family shares: the context a price is asked in (`Ctx`), a family's answer
(`Price`), a step's share of tokens for the pure-Python reference (`Step`), and the chip's rates
and measured tables as the families read them (hardware.op_model=fitted, docs/model.md, "Per-shape
operator laws")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, List, Mapping, Optional

import numpy as np

from decodelab.kernel_layout import Law, Lin
from decodelab.opcost.versions import NOT_A_RELEASE, nearest, parse

OP_MODELS = ("roofline", "fitted")
RELEASE_KINDS = ("gemm", "attention_decode", "mla_decode", "moe")  # op_tables.by_version entries
ATTN_DTYPES = {"bf16": 2.0, "fp8": 1.0}  # attention classes by KV dtype (its bytes per element)
ATTN_KEY = re.compile(r"^(bf16|fp8)_hd(\d+)$")  # op_fit.attention_prefill / attention_decode keys
_RANGES = {  # field: (low, high, low inclusive) of a physical value
    "e_c": (0.0, 1.0, False),
    "e_b": (0.0, 1.0, False),
    "e_a": (0.0, 1.0, False),
    "p": (1.0, 100.0, True),
}
_POSITIVE = ("bw_kv_tbs", "beta_gb_s")  # > 0; every other field >= 0


@dataclass(frozen=True)
class Ctx:
    """The plain values a price needs: the hardware node (its op_fit laws, op_tables, rates), the
    workload's weight and KV dtypes, the tensor-parallel degree, the engine family (engine.family:
    whose own laws and tables apply, "" = the chip's), the engine's sampler path ("" = one pass
    over the logits; opcost.sampler.path) and vocabulary, engine.moe_mxfp4, the engine's MoE
    backend (engine.moe_backend, under attention DP moe_backend_attention_dp; opcost.moe KERNELS) and
    its block-scaled FP8 GEMM kernel (engine.gemm_backend_fp8_block; opcost.gemm)."""

    hw: Any
    weight_dtype: str
    kv_dtype: str
    tp: int = 1
    engine: str = ""
    engine_version: str = ""  # engine.version: the release whose tables it reads (op_table)
    sampler_path: str = ""
    vocab: int = 0
    moe_mxfp4: str = "w4a16"
    moe_backend: str = ""
    gemm_fp8_block: str = ""  # engine.gemm_backend_fp8_block: "" (the engine's tables) | trtllm (the chip's)
    # prices already worked out in this context (registry.prices: the kernel columns and the run
    # note of one build read the same ones): id(op) -> (op, prices)
    memo: dict = field(default_factory=dict, compare=False, hash=False, repr=False)

    @property
    def fitted(self) -> bool:
        return getattr(self.hw, "op_model", "roofline") == "fitted"


@dataclass(frozen=True)
class Price:
    """A family's cost of one op in the kernel's law columns (kernel_layout.Lin). `code`: the law
    the op runs under (kernel_layout.Law; Law.NONE: only adds columns to another family's law);
    `cols`: column -> value; `tab`: the op's measured row (columns Lin.TAB ...), flagged by column
    `tab_flag` (Lin.G_TAB: on M_GRID; Lin.D_TAB: on B_GRID x C_GRID); `whole`: this family alone
    costs the op (no other family is asked); `fallback`: `code` and `tab` hold only where no other
    family costs the op (a collective alone). `law`: the family's own law data, for its reference
    timing and note."""

    family: str
    code: float = Law.NONE
    cols: Mapping[int, float] = field(default_factory=dict)
    tab: Optional[np.ndarray] = None
    tab_flag: int = Lin.G_TAB
    whole: bool = False
    fallback: bool = False
    law: Any = None


@dataclass(frozen=True)
class Step:
    """One op's share of a step, for the pure-Python reference (core/reference.py): `tokens` through
    the op (its sampled tokens after the decoder stack, every group's under data-parallel
    attention); the prefilling sequences' tokens, causal pairs and sequences; the decoding
    sequences' tokens, sequences and KV tokens read."""

    tokens: float
    pre_tokens: float = 0.0
    pre_pairs: float = 0.0
    pre_seqs: float = 0.0
    dec_tokens: float = 0.0
    dec_seqs: float = 0.0
    dec_kv: float = 0.0


def pnorm(a, b, p):
    """(a^p + b^p)^(1/p), computed without overflow (0 when both are 0)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    hi = np.maximum(a, b)
    safe = np.where(hi > 0, hi, 1.0)
    return np.where(hi > 0, hi * ((a / safe) ** p + (b / safe) ** p) ** (1.0 / p), 0.0)


def peak(hw, dtype: str) -> float:
    """The dense peak FLOP/s a law of this dtype is fitted against (FP8 units where the chip has them)."""
    if dtype in ("fp8", "fp8_block", "mxfp4_w4a8") and hw.peak_tflops_fp8 > 0:
        return hw.peak_tflops_fp8 * 1e12
    return hw.peak_tflops_bf16 * 1e12


def hbm_bw(hw) -> float:
    return hw.memory["hbm"].bandwidth_gb_s * 1e9


def gemm_dtype(op, weight_dtype: str) -> str:
    """The weight dtype of a GEMM op: its own (the LM head's 16-bit dtype under quantized weights,
    components/ops.py) or the workload's."""
    return getattr(op, "gemm_dtype", "") or weight_dtype


def op_table(hw, kind: str, engine: str = "", version: str = "") -> str:
    """hardware.op_tables.<kind> (gemm | all_reduce | attention_decode | mla_decode | moe), "" where
    the chip has none; with `engine`, that engine's own table: at its release `version` the one of
    op_tables.by_version.<engine> nearest it (opcost/versions.py) while <kind>_by_engine.<engine> is unset
    or one of them (a table of one's own there, or "", stands for every release), else
    <kind>_by_engine.<engine>; "" where it has none."""
    tables = getattr(hw, "op_tables", None)
    if not engine:
        return str(getattr(tables, kind, "") or "")
    by_engine = getattr(tables, f"{kind}_by_engine", None) or {}
    default = str(by_engine.get(engine, "") or "")
    listed = release_tables(tables, kind, engine) if version else {}
    if listed and (engine not in by_engine or default in listed.values()):
        return listed[nearest(version, listed)]
    return default


def release_tables(tables, kind: str, engine: str) -> dict:
    """release -> the `kind` table of that release of `engine` (op_tables.by_version)."""
    listed = (getattr(tables, "by_version", None) or {}).get(engine) or {}
    return {str(v): str(k[kind]) for v, k in listed.items() if (k or {}).get(kind)}


def table_paths(ctx, kind: str) -> List[str]:
    """The `kind` tables to look an engine's op up in, first that holds it: the engine's own (of its
    release, op_table), then the chip's."""
    own = op_table(ctx.hw, kind, ctx.engine, ctx.engine_version)
    return [p for p in dict.fromkeys((own, op_table(ctx.hw, kind))) if p]


def engine_tables(ctx, kind: str) -> List[str]:
    """table_paths, none where the chip differs from the one they were measured on (table_mismatch: no
    law carries a kernel table)."""
    return [] if table_mismatch(ctx.hw) else table_paths(ctx, kind)


def table_fields(hw, kind: str) -> List[tuple]:
    """(op_tables field, path) of the chip's `kind` table, each engine's own and each release's."""
    tables = getattr(hw, "op_tables", None)
    engines = getattr(tables, f"{kind}_by_engine", None) or {}
    out = [(kind, op_table(hw, kind))] + [(f"{kind}_by_engine.{x}", op_table(hw, kind, x)) for x in engines]
    for eng in getattr(tables, "by_version", None) or {}:
        out += [(f"by_version.{eng}.{v}.{kind}", p) for v, p in release_tables(tables, kind, eng).items()]
    return out


def check_tables(hw, kind: str, problem) -> List[str]:
    """One line per `kind` table of the chip (of each engine, of each release) that `problem(path)` rejects."""
    e = []
    for name, path in table_fields(hw, kind):
        bad = problem(path) if path else None
        if bad:
            e.append(f"hardware.op_tables.{name}: {bad}")
    return e


def release_note(ctx) -> Optional[str]:
    """The releases whose tables a design of release ctx.engine_version reads, where the chip lists its
    engine's tables per release ("vllm 0.17.0 reads release tables 0.18.0 (gemm, attention_decode, moe)")."""
    tables = getattr(ctx.hw, "op_tables", None)
    if not ctx.engine_version or table_mismatch(ctx.hw):
        return None
    read: dict = {}
    for kind in RELEASE_KINDS:
        listed = release_tables(tables, kind, ctx.engine)
        path = op_table(ctx.hw, kind, ctx.engine, ctx.engine_version)
        for v, p in listed.items():
            if p == path:
                read.setdefault(v, []).append(kind)
    if not read:
        return None
    said = ", ".join(f"{v} ({', '.join(k)})" for v, k in read.items())
    return f"{ctx.engine} {ctx.engine_version} reads release tables {said}"


def check_releases(hw) -> List[str]:
    """One line per op_tables.by_version entry that is not a release, or names a kind of table that is not
    listed per release."""
    tables = getattr(hw, "op_tables", None)
    e = []
    for eng, listed in (getattr(tables, "by_version", None) or {}).items():
        for v, kinds in (listed or {}).items():
            where = f"hardware.op_tables.by_version.{eng}.{v}"
            if parse(v) is None:
                e.append(f"{where}: {v!r} {NOT_A_RELEASE}")
            bad = [k for k in kinds or {} if k not in RELEASE_KINDS]
            e += [f"{where}.{k}: not one of: {', '.join(RELEASE_KINDS)}" for k in bad]
    return e


_TABLE_CHIP = (  # op_tables field: the chip's own value
    ("hbm_gb_s", lambda hw: hw.memory["hbm"].bandwidth_gb_s),
    ("peak_tflops_bf16", lambda hw: hw.peak_tflops_bf16),
    ("peak_tflops_fp8", lambda hw: hw.peak_tflops_fp8),
)


def table_mismatch(hw) -> list:
    """The fields in which this chip differs from the one its op_tables were measured on."""
    t = getattr(hw, "op_tables", None)
    if t is None:
        return []
    out = []
    for name, own in _TABLE_CHIP:
        measured = float(getattr(t, name, 0.0) or 0.0)
        if measured > 0 and abs(float(own(hw)) - measured) > 1e-6 * measured:
            out.append(f"{name} {measured:g} (this chip {float(own(hw)):g})")
    return out


def check_values(group: str, key: str, law) -> List[str]:
    """One line per field of a fitted law outside its physical range."""
    e = []
    for name in law:
        if isinstance(law[name], str):  # a law's provenance note (SamplerLaw.caveat)
            continue
        v = float(law[name])
        lo, hi, inclusive = _RANGES.get(name, (0.0, np.inf, name not in _POSITIVE))
        ok = np.isfinite(v) and (lo <= v if inclusive else lo < v) and v <= hi
        if not ok:
            lo_s = "[" if inclusive else "("
            e.append(f"hardware.op_fit.{group}.{key}.{name}={v} must be in {lo_s}{lo}, {hi}]")
    return e


def attention_key(ctx: Ctx, op) -> str:
    """The attention law class of an op: `<kv dtype>_hd<head dim>` (hardware.op_fit.attention_*)."""
    return f"{ctx.kv_dtype}_hd{int(op.attn_head_dim)}"


def gqa_attention(op) -> bool:
    """A GQA/MHA attention op, priced by the prefill and the decode attention families together
    (MLA's decode-path latent attention: opcost.mla)."""
    return op.attn_head_dim > 0 and not op.in_attention_call and op.path != "decode"


def attention_fitted(ctx: Ctx, op) -> bool:
    """The chip has both attention laws (prefill and decode) of the op's class: its attention call
    is law-costed (the two laws cost one kernel, RoPE and the KV write inside it)."""
    fit, key = ctx.hw.op_fit, attention_key(ctx, op)
    return key in fit.attention_prefill and key in fit.attention_decode
