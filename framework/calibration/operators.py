"""Operator microbenchmark CSVs in AIConfigurator's schema (github.com/ai-dynamo/aiconfigurator,
`systems/data/<chip>/`; the H100 SXM copies are /work/shared/validation/h100_operators/): which
kind a file is, its columns checked, and the rows of each law class with the units decodelab uses.

Units, from AIConfigurator's collector (docs/model.md "Per-shape operator laws"): latency_ms is one
call inside a CUDA graph; a GEMM is x[m, k] times a weight [n, k]; generation attention reads
step + 1 KV tokens per sequence; `message_size` of an NCCL row (nccl-tests) and of a TensorRT-LLM
all-reduce row is an element count of the whole per-rank tensor (all_gather: the gathered output).
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np

# kind -> required columns (int, num, str); a file's kind is the first whose columns it has
SCHEMAS = {
    # MLA's prefill attention (DeepSeek's dims: qk 128 + 64, v 128; num_heads per GPU), AIConfigurator's
    # context_mla_perf: an engine's own kernel where a `framework` column names one other than TensorRT-LLM
    "context_mla": {
        "batch_size": "int",
        "isl": "int",
        "num_heads": "int",
        "mla_dtype": "str",
        "kv_cache_dtype": "str",
        "latency_ms": "num",
    },
    "generation_attention": {
        "batch_size": "int",
        "isl": "int",
        "num_heads": "int",
        "num_key_value_heads": "int",
        "head_dim": "int",
        "window_size": "int",
        "attn_dtype": "str",
        "kv_cache_dtype": "str",
        "step": "int",
        "latency_ms": "num",
    },
    "context_attention": {
        "batch_size": "int",
        "isl": "int",
        "num_heads": "int",
        "num_key_value_heads": "int",
        "head_dim": "int",
        "window_size": "int",
        "attn_dtype": "str",
        "kv_cache_dtype": "str",
        "latency_ms": "num",
    },
    "gemm": {"gemm_dtype": "str", "m": "int", "n": "int", "k": "int", "latency_ms": "num"},
    "allreduce": {"allreduce_dtype": "str", "num_gpus": "int", "message_size": "int", "latency_ms": "num"},
    "nccl": {
        "op_name": "str",
        "nccl_dtype": "str",
        "num_gpus": "int",
        "message_size": "int",
        "latency_ms": "num",
    },
    # an engine's top-k / top-p sampler path on batch x vocab FP32 logits (opcost/sampler.py)
    "sampler": {"batch": "int", "vocab": "int", "latency_ms": "num"},
}
# An all-reduce or MLA prefill CSV with a `framework` column other than these is that engine's own kernel
# (hardware.op_fit.all_reduce_by_engine / mla_prefill_by_engine.<framework>); without the column, TensorRT-LLM's.
TRTLLM_NAMES = ("trtllm", "tensorrt-llm", "tensorrt_llm")
# The column that tells the kinds apart (checked in this order).
MARKERS = {
    "context_mla": "mla_dtype",
    "generation_attention": "step",
    "context_attention": "isl",
    "gemm": "gemm_dtype",
    "allreduce": "allreduce_dtype",
    "nccl": "op_name",
    "sampler": "vocab",
}
DTYPES = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "fp8": "fp8",
    "fp8_block": "fp8_block",
}  # CSV dtype -> decodelab dtype
ELEMENT_BYTES = {"bfloat16": 2.0, "half": 2.0, "float16": 2.0, "int8": 1.0, "fp8": 1.0}


class OperatorCSVError(ValueError):
    """A CSV that is not an operator file in the schema (one line: the file and the problem)."""


def read(path: Path):
    """The file's rows as a DataFrame with a seconds column `t`, and its kind."""
    import pandas as pd

    try:
        df = pd.read_csv(path)
    except Exception as e:  # unreadable or empty
        raise OperatorCSVError(f"{path}: cannot read as CSV ({type(e).__name__}: {e})") from None
    kind = next((k for k, col in MARKERS.items() if col in df.columns), None)
    if kind is None:
        raise OperatorCSVError(
            f"{path}: not an operator CSV (needs one of the columns {', '.join(MARKERS.values())})"
        )
    schema = SCHEMAS[kind]
    missing = [c for c in schema if c not in df.columns]
    if missing:
        raise OperatorCSVError(f"{path}: {kind} CSV misses column(s) {', '.join(missing)}")
    if df.empty:
        raise OperatorCSVError(f"{path}: {kind} CSV has no rows")
    for c, typ in schema.items():
        if typ == "str":
            if df[c].isna().any():
                raise OperatorCSVError(f"{path}: column {c} has empty values")
            continue
        v = pd.to_numeric(df[c], errors="coerce")
        if v.isna().any() or not np.isfinite(v).all():
            raise OperatorCSVError(f"{path}: column {c} has non-numeric or empty values")
        if typ == "int" and not (np.mod(v, 1) == 0).all():
            raise OperatorCSVError(f"{path}: column {c} must hold whole numbers")
        if c == "latency_ms" and not (v > 0).all():
            raise OperatorCSVError(f"{path}: column latency_ms must be > 0")
        if c not in ("window_size", "m") and (v < 0).any():
            raise OperatorCSVError(f"{path}: column {c} must be >= 0")
        df[c] = v
    df["t"] = df["latency_ms"] * 1e-3
    if kind in ("allreduce", "context_mla") and "framework" in df.columns:  # an engine's own kernel
        engines = sorted({str(x).strip().lower() for x in df.framework})
        if len(engines) != 1:
            raise OperatorCSVError(f"{path}: one framework per {kind} CSV, got {', '.join(engines)}")
        if engines[0] not in TRTLLM_NAMES:
            kind = f"{kind}:{engines[0]}"
    return df, kind


def load(paths: List[Path]) -> Dict[str, tuple]:
    """kind -> (DataFrame, file name) for the given files or directories (their *.csv)."""
    files: List[Path] = []
    for p in paths:
        p = Path(p).expanduser()
        if p.is_dir():
            files += sorted(p.glob("*.csv"))
        elif p.is_file():
            files.append(p)
        else:
            raise OperatorCSVError(f"{p}: no such file or directory")
    if not files:
        raise OperatorCSVError(f"no *.csv among {', '.join(map(str, paths))}")
    out: Dict[str, tuple] = {}
    for f in files:
        df, kind = read(f)
        if kind in out:
            raise OperatorCSVError(
                f"{f}: a second {kind} CSV (first: {out[kind][1]}); pass one file per kind, e.g. "
                "the engine's GEMM file only"
            )
        out[kind] = (df, f.name)
    return out


# ---- the rows of each law class (the fit rows: the serving range where the law is meant to hold)


def gemm_rows(df, dtype: str):
    """GEMM rows of a decodelab weight dtype: 1 <= m <= 16384, n, k >= 256 (m = 0 is a no-op call;
    m > 16k runs ~5-10% slower, clocks or power)."""
    d = df[df.gemm_dtype.map(DTYPES) == dtype]
    return d[(d.m >= 1) & (d.m <= 16384) & (d.n >= 256) & (d.k >= 256)]


def context_rows(df, dtype: str, head_dim: int):
    """Prefill attention of attention dtype `dtype` (FP8 attention runs with an FP8 KV cache):
    no sliding window, >= 4 query heads (fewer leave SMs idle), batch x isl <= 16384."""
    d = df[(df.attn_dtype.map(DTYPES) == dtype) & (df.head_dim == head_dim) & (df.window_size <= 0)]
    return d[(d.num_heads >= 4) & (d.batch_size * d.isl <= 16384)]


def mla_context_rows(df, kv_dtype: str):
    """MLA prefill attention with a `kv_dtype` cache: >= 2 heads per GPU, batch x isl <= 16384 (as
    context_rows)."""
    d = df[df.kv_cache_dtype.map(DTYPES) == kv_dtype]
    return d[(d.num_heads >= 2) & (d.batch_size * d.isl <= 16384)]


def generation_rows(df, kv_dtype: str, head_dim: int, hbm_bytes_s: float = 0.0, kv_elt_bytes: float = 2.0):
    """Decode attention with a `kv_dtype` cache: no window, GQA group 2..16 (MHA and larger groups
    use other kernels), batch <= 512, step <= 32767; with `hbm_bytes_s` > 0, also no row whose KV
    read (batch x (step + 1) x 2 x KV heads x head_dim x `kv_elt_bytes`) over its latency beats that
    HBM bandwidth: such a row did not read its KV from HBM
    (docs/journal/2026-11-24-operator-laws-h100.md)."""
    d = df[(df.kv_cache_dtype.map(DTYPES) == kv_dtype) & (df.head_dim == head_dim) & (df.window_size <= 0)]
    group = d.num_heads / d.num_key_value_heads
    d = d[(group >= 2) & (group <= 16) & (d.batch_size <= 512) & (d.step <= 32767)]
    if hbm_bytes_s > 0:
        kv_bytes = d.batch_size * (d.step + 1.0) * 2.0 * d.num_key_value_heads * d.head_dim * kv_elt_bytes
        d = d[kv_bytes <= hbm_bytes_s * d.t]
    return d


def collective_rows(df, kind: str, op: str, n_gpus: int):
    """(bytes of the whole per-rank tensor, seconds) of one collective at `n_gpus` GPUs."""
    if kind.startswith("allreduce"):  # TensorRT-LLM's, or an engine's own (allreduce:<engine>)
        d = df[df.num_gpus == n_gpus]
        elt = d.allreduce_dtype.map(ELEMENT_BYTES)
    else:
        d = df[(df.num_gpus == n_gpus) & (df.op_name == op)]
        elt = d.nccl_dtype.map(ELEMENT_BYTES)
    ok = elt.notna()
    return (d.message_size[ok] * elt[ok]).to_numpy(float), d.t[ok].to_numpy(float)
